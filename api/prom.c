/* prom.c - Prometheus text format writer (see prom.h for the format). */
#include "prom.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void put_escaped(rm__sbuf_t *b, const char *s, int quote)
{
  for (; *s; s++) {
    if (*s == '\\') rm__sbuf_puts(b, "\\\\");
    else if (*s == '\n') rm__sbuf_puts(b, "\\n");
    else if (quote && *s == '"') rm__sbuf_puts(b, "\\\"");
    else rm__sbuf_append(b, s, 1);
  }
}

static void put_value(rm__sbuf_t *b, double v)
{
  if (isnan(v)) rm__sbuf_puts(b, "NaN");
  else if (isinf(v)) rm__sbuf_puts(b, v > 0 ? "+Inf" : "-Inf");
  else if (v == (double)(int64_t)v && fabs(v) < 9e15) rm__sbuf_printf(b, "%lld", (long long)v);
  else rm__sbuf_printf(b, "%.9g", v);
}

/* Writes {a="x",b="y"[,extra="v"]} or nothing when there are no labels. */
static void put_labels(rm__sbuf_t *b, const char *const *labels, const char *extra_name,
                       const char *extra_value)
{
  int n = 0;
  if ((labels == NULL || labels[0] == NULL) && extra_name == NULL) return;
  rm__sbuf_puts(b, "{");
  for (int i = 0; labels && labels[i] && labels[i + 1]; i += 2, n++) {
    if (n) rm__sbuf_puts(b, ",");
    rm__sbuf_printf(b, "%s=\"", labels[i]);
    put_escaped(b, labels[i + 1], 1);
    rm__sbuf_puts(b, "\"");
  }
  if (extra_name) {
    if (n) rm__sbuf_puts(b, ",");
    rm__sbuf_printf(b, "%s=\"%s\"", extra_name, extra_value);
  }
  rm__sbuf_puts(b, "}");
}

void rm__prom_family(rm__sbuf_t *b, const char *name, rm__prom_type_t type, const char *help)
{
  static const char *const types[] = {"counter", "gauge", "histogram", "summary"};
  rm__sbuf_printf(b, "# HELP %s ", name);
  put_escaped(b, help, 0);
  rm__sbuf_printf(b, "\n# TYPE %s %s\n", name, types[type]);
}

void rm__prom_sample(rm__sbuf_t *b, const char *name, const char *const *labels, double value)
{
  rm__sbuf_puts(b, name);
  put_labels(b, labels, NULL, NULL);
  rm__sbuf_puts(b, " ");
  put_value(b, value);
  rm__sbuf_puts(b, "\n");
}

void rm__prom_histogram(rm__sbuf_t *b, const char *name, const char *const *labels,
                        const rm__prom_hist_t *h)
{
  uint64_t cum = 0;
  char le[40];

  for (int i = 0; i <= h->nbounds; i++) {
    cum += h->counts[i];
    if (i < h->nbounds) snprintf(le, sizeof le, "%g", h->bounds[i]);
    else snprintf(le, sizeof le, "+Inf");
    rm__sbuf_printf(b, "%s_bucket", name);
    put_labels(b, labels, "le", le);
    rm__sbuf_printf(b, " %llu\n", (unsigned long long)cum);
  }
  rm__sbuf_printf(b, "%s_sum", name);
  put_labels(b, labels, NULL, NULL);
  rm__sbuf_puts(b, " ");
  put_value(b, h->sum);
  rm__sbuf_printf(b, "\n%s_count", name);
  put_labels(b, labels, NULL, NULL);
  rm__sbuf_printf(b, " %llu\n", (unsigned long long)cum);
}
