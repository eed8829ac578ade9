/*
 * rm_metrics.c - the rules of a step's named metrics (rm_metrics.h).
 *
 * A name is what a chart is labelled and keyed by, in JSON and in the
 * stored "name value" lines (store_rows.c STEP METRICS), so it is kept to a
 * charset that needs no quoting anywhere: a letter, then letters, digits
 * and _ . : / - (TensorBoard-style "train/loss" fits), under
 * RM_METRIC_NAME_MAX bytes. "loss" and "accuracy" are the step's own
 * fields, plotted as such; a metric of either name would show twice under
 * one label, so it is refused. Values must be finite: JSON has no NaN or
 * infinity, and a chart of one is a gap nobody asked for.
 */
#include "rm_metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int name_char(char ch, int first)
{
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) return 1;
  if (first) return 0;
  return (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == ':' || ch == '/' ||
         ch == '-';
}

int rm__metric_name_check(const char *name, char *why, size_t len)
{
  if (!name || !*name) {
    snprintf(why, len, "a metric name is empty");
    return -1;
  }
  size_t n = strnlen(name, RM_METRIC_NAME_MAX);
  if (n >= RM_METRIC_NAME_MAX) {
    snprintf(why, len, "metric name '%.*s...' is longer than %d bytes", 16, name,
             RM_METRIC_NAME_MAX - 1);
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    if (!name_char(name[i], i == 0)) {
      snprintf(why, len, "metric name '%s': byte %zu (0x%02x) is not allowed (a letter, then "
               "letters, digits and _ . : / -)", name, i + 1, (unsigned char)name[i]);
      return -1;
    }
  if (!strcmp(name, "loss") || !strcmp(name, "accuracy")) {
    snprintf(why, len, "metric name '%s' is the step's own field: report it as the step's %s",
             name, name);
    return -1;
  }
  return 0;
}

int rm__metrics_check(const char *const *names, const double *values, size_t n, char *why,
                      size_t len)
{
  if (n > RM_METRICS_MAX) {
    snprintf(why, len, "%zu metrics in one step; at most %d", n, RM_METRICS_MAX);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    if (rm__metric_name_check(names[i], why, len)) return -1;
    if (!isfinite(values[i])) {
      snprintf(why, len, "metric '%s' is %s; a metric's value must be finite", names[i],
               isnan(values[i]) ? "NaN" : "infinite");
      return -1;
    }
    for (size_t k = 0; k < i; k++)
      if (!strcmp(names[k], names[i])) {
        snprintf(why, len, "metric '%s' is reported twice in one step", names[i]);
        return -1;
      }
  }
  return 0;
}
