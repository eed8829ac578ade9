/*
 * prom.h - Prometheus text exposition format (version 0.0.4) writer.
 *
 * Format, per metric family, in this order:
 *
 *   # HELP <name> <help text, '\' and newline escaped>
 *   # TYPE <name> counter|gauge|histogram
 *   <name>{label="value",...} <value>
 *
 * Histograms write cumulative <name>_bucket{...,le="<bound>"} lines ending
 * with le="+Inf", then <name>_sum and <name>_count. A summary without
 * quantiles is just <name>_sum and <name>_count (written with two
 * rm__prom_sample calls). Label values escape '\',
 * '"' and newline. Names follow the conventions: base units (seconds, bytes),
 * counters end in _total. Each family must be written in one block (the
 * format forbids interleaving); callers write the family header once and
 * then all its samples.
 */
#ifndef RM_API_PROM_H
#define RM_API_PROM_H

#include <stdint.h>

#include "sbuf.h"

typedef enum { RM_PROM_COUNTER, RM_PROM_GAUGE, RM_PROM_HISTOGRAM, RM_PROM_SUMMARY } rm__prom_type_t;

/* Label list: alternating name, value, ..., NULL-terminated; NULL for none. */
void rm__prom_family(rm__sbuf_t *b, const char *name, rm__prom_type_t type, const char *help);
void rm__prom_sample(rm__sbuf_t *b, const char *name, const char *const *labels, double value);

/* A histogram: `bounds` are the upper bounds (ascending, without +Inf);
 * `counts[i]` is the NON-cumulative count of observations in bucket i, with
 * counts[nbounds] the overflow bucket (> last bound). */
typedef struct {
  const double *bounds;
  int nbounds;
  const uint64_t *counts; /* nbounds + 1 entries */
  double sum;
} rm__prom_hist_t;

void rm__prom_histogram(rm__sbuf_t *b, const char *name, const char *const *labels,
                        const rm__prom_hist_t *h);

#endif
