/*
 * rm_agg.c - aggregation methods in words and their rules
 * (include/ringmaster/aggregation.h). Compiled into libringmaster and
 * rm_common: the coordinator refuses a job spec with exactly the rule the
 * workers' rm_aggregate applies.
 *
 *   method          rule on n contributors, f tolerated Byzantine workers
 *   mean            n >= 1
 *   median          n >= 2f + 1
 *   trimmed_mean    n > 2f
 *   krum            n > 2f + 2
 *   multi_krum      n > 2f + 2 and 0 <= m <= n - f (0 = n - f)
 *   bulyan          n >= 4f + 3
 *   centered_clip   n >= 2f + 1; tau >= 0, iterations >= 0 (0 = defaults)
 *   every method    f >= 0, clip_norm >= 0 and finite
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ringmaster/aggregation.h"

static const char *const g_names[RM_AGG_COUNT] = {
    [RM_AGG_MEAN] = "mean",           [RM_AGG_MEDIAN] = "median",
    [RM_AGG_TRIMMED_MEAN] = "trimmed_mean", [RM_AGG_KRUM] = "krum",
    [RM_AGG_MULTI_KRUM] = "multi_krum", [RM_AGG_BULYAN] = "bulyan",
    [RM_AGG_CENTERED_CLIP] = "centered_clip",
};

const char *rm_agg_method_name(rm_agg_method_t m)
{
  return (unsigned)m < RM_AGG_COUNT ? g_names[m] : "unknown";
}

rm_status_t rm_agg_method_parse(const char *s, rm_agg_method_t *out)
{
  for (int i = 0; s && i < RM_AGG_COUNT; i++)
    if (!strcmp(s, g_names[i])) {
      if (out) *out = (rm_agg_method_t)i;
      return RM_OK;
    }
  return RM_ERR_INVALID_ARG;
}

void rm_agg_config_init(rm_agg_config_t *cfg)
{
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->version = RM_AGG_CONFIG_VERSION;
  cfg->method = RM_AGG_MEAN;
}

size_t rm_agg_config_size(void) { return sizeof(rm_agg_config_t); }

static rm_status_t refuse(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rm_status_t refuse(char *why, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  if (why && len) vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return RM_ERR_INVALID_ARG;
}

rm_status_t rm_agg_check(const rm_agg_config_t *c, int n, char *why, size_t len)
{
  if (why && len) why[0] = 0;
  if (!c || c->struct_size < sizeof *c || c->version != RM_AGG_CONFIG_VERSION ||
      (unsigned)c->method >= RM_AGG_COUNT)
    return refuse(why, len, "not a config from rm_agg_config_init");
  if (c->f < 0) return refuse(why, len, "f must be >= 0, got %d", c->f);
  if (!(c->clip_norm >= 0) || isinf(c->clip_norm))
    return refuse(why, len, "clip_norm must be a finite number >= 0");
  if (n < 1) return refuse(why, len, "no contributors (n = %d)", n);
  int f = c->f;
  switch (c->method) {
  case RM_AGG_MEAN:
    return RM_OK;
  case RM_AGG_MEDIAN:
    return n >= 2 * f + 1 ? RM_OK
                          : refuse(why, len, "median needs n >= 2f + 1: n = %d, f = %d", n, f);
  case RM_AGG_TRIMMED_MEAN:
    return n > 2 * f ? RM_OK
                     : refuse(why, len, "trimmed_mean needs n > 2f: n = %d, f = %d", n, f);
  case RM_AGG_KRUM:
    return n > 2 * f + 2 ? RM_OK
                         : refuse(why, len, "krum needs n > 2f + 2: n = %d, f = %d", n, f);
  case RM_AGG_MULTI_KRUM:
    if (n <= 2 * f + 2)
      return refuse(why, len, "multi_krum needs n > 2f + 2: n = %d, f = %d", n, f);
    if (c->m < 0 || c->m > n - f)
      return refuse(why, len, "multi_krum needs 0 <= m <= n - f: m = %d, n - f = %d", c->m,
                    n - f);
    return RM_OK;
  case RM_AGG_BULYAN:
    return n >= 4 * f + 3 ? RM_OK
                          : refuse(why, len, "bulyan needs n >= 4f + 3: n = %d, f = %d", n, f);
  case RM_AGG_CENTERED_CLIP:
    if (!(c->tau >= 0) || isinf(c->tau) || c->iterations < 0)
      return refuse(why, len, "centered_clip needs tau >= 0 and iterations >= 0");
    return n >= 2 * f + 1
               ? RM_OK
               : refuse(why, len, "centered_clip needs n >= 2f + 1: n = %d, f = %d", n, f);
  default:
    return refuse(why, len, "unknown method");
  }
}
