/*
 * aggregation.h - the aggregation methods of rm_aggregate (ringmaster.h),
 * their rules and their config (public; included by ringmaster.h). The
 * names, parser and rule check are implemented in common/rm_agg.c, so the
 * coordinator checks a job spec with the same rules the workers apply.
 *
 * rm_aggregate combines every rank's `send` into the same `recv` on every
 * rank (bitwise identical), like rm_allreduce(..., RM_AVG), but by a method
 * that a bounded number f of arbitrary (Byzantine) contributions cannot
 * drag far:
 *
 *   mean           the average (clipping still applies)       n >= 1
 *   median         coordinate-wise median                     n >= 2f + 1
 *   trimmed_mean   coordinate-wise, drop the f lowest and the
 *                  f highest, average the rest                n > 2f
 *   krum           the one vector whose sum of squared
 *                  distances to its n - f - 2 nearest others
 *                  is smallest (Blanchard et al. 2017)         n > 2f + 2
 *   multi_krum     the mean of the m best-scored (m = n - f
 *                  when 0)                                    n > 2f + 2, m <= n - f
 *   bulyan         Krum-select n - 2f, then per coordinate the
 *                  mean of the n - 4f values closest to the
 *                  median (El Mhamdi et al. 2018)              n >= 4f + 3
 *   centered_clip  iterated clipping around the previous
 *                  aggregate (Karimireddy et al. 2021; radius
 *                  tau, `iterations` rounds)                  n >= 2f + 1
 *
 * clip_norm > 0 first scales each rank's vector to L2 norm <= clip_norm
 * (then the method). NaN and Inf rows are handled: they count as extreme
 * (never chosen by Krum, trimmed by median/trimmed mean).
 *
 * Bandwidth: no all-gather of whole vectors. Coordinate-wise methods
 * exchange slices (all-to-all, statistic on the slice, all-gather: 2(N-1)/N
 * of the data per rank); the Krum family adds one all-reduce of the N x N
 * partial squared distances. Float dtypes (f32, f64, f16, bf16). */
#ifndef RINGMASTER_AGGREGATION_H
#define RINGMASTER_AGGREGATION_H

#include <stddef.h>

#include "ringmaster/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RM_AGG_MEAN = 0,
  RM_AGG_MEDIAN = 1,
  RM_AGG_TRIMMED_MEAN = 2,
  RM_AGG_KRUM = 3,
  RM_AGG_MULTI_KRUM = 4,
  RM_AGG_BULYAN = 5,
  RM_AGG_CENTERED_CLIP = 6,
  RM_AGG_COUNT
} rm_agg_method_t;

/* "mean", "median", "trimmed_mean", "krum", "multi_krum", "bulyan",
 * "centered_clip"; parse is exact (RM_ERR_INVALID_ARG otherwise). */
RM_EXTERN const char *rm_agg_method_name(rm_agg_method_t m);
RM_EXTERN rm_status_t rm_agg_method_parse(const char *s, rm_agg_method_t *out);

#define RM_AGG_CONFIG_VERSION 1

typedef struct rm_agg_config {
  size_t struct_size;     /* set by rm_agg_config_init */
  unsigned version;       /* RM_AGG_CONFIG_VERSION */
  rm_agg_method_t method; /* RM_AGG_MEAN */
  int f;                  /* tolerated Byzantine workers, >= 0 */
  int m;                  /* multi_krum selections; 0 = n - f */
  double clip_norm;       /* per-rank L2 clip before the method; 0 = off */
  double tau;             /* centered_clip radius; 0 = 1.0 */
  int iterations;         /* centered_clip rounds; 0 = 3 */
} rm_agg_config_t;

RM_EXTERN void rm_agg_config_init(rm_agg_config_t *cfg);
RM_EXTERN size_t rm_agg_config_size(void);
/* Does cfg's rule hold for n contributors? RM_OK, or RM_ERR_INVALID_ARG
 * with words in why ("krum needs n > 2f + 2: n = 4, f = 1"). */
RM_EXTERN rm_status_t rm_agg_check(const rm_agg_config_t *cfg, int n,
                                   char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif /* RINGMASTER_AGGREGATION_H */
