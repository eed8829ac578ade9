/*
 * rm_opts.c - workload option strings (rm_opts.h): the one parser of the job
 * spec's `options` field, used by every built-in workload (worker/train/,
 * worker/agent/wl_allreduce.c).
 *
 * Option grammar (what the job spec's `options` field holds):
 *
 *   options := "" | pair ("," pair)*
 *   pair    := key "=" value        key: [a-z0-9_]+, value: no ','
 *
 * Blanks around keys and values are ignored. Unknown keys are the caller's
 * business (each workload refuses them by name).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_opts.h"

/* Copy [b, e) trimmed of blanks into dst; 0 when it does not fit. */
static int copy_trimmed(const char *b, const char *e, char *dst, size_t len)
{
  while (b < e && isspace((unsigned char)*b)) b++;
  while (e > b && isspace((unsigned char)e[-1])) e--;
  if ((size_t)(e - b) >= len) return 0;
  memcpy(dst, b, (size_t)(e - b));
  dst[e - b] = '\0';
  return 1;
}

int rm__opt_next(const char **p, char *key, size_t klen, char *val,
                 size_t vlen, char *err, size_t errlen)
{
  const char *s = *p;
  while (*s == ',' || isspace((unsigned char)*s)) s++;
  if (*s == '\0') {
    *p = s;
    return 0;
  }
  const char *end = strchr(s, ',');
  if (!end) end = s + strlen(s);
  const char *eq = memchr(s, '=', (size_t)(end - s));
  if (!eq) {
    snprintf(err, errlen, "option '%.*s': expected key=value", (int)(end - s),
             s);
    return -1;
  }
  if (!copy_trimmed(s, eq, key, klen) || key[0] == '\0') {
    snprintf(err, errlen, "option '%.*s': bad or over-long key",
             (int)(end - s), s);
    return -1;
  }
  if (!copy_trimmed(eq + 1, end, val, vlen)) {
    snprintf(err, errlen, "option '%s': value too long (max %zu)", key,
             vlen - 1);
    return -1;
  }
  *p = end;
  return 1;
}

rm_status_t rm__opt_u64(const char *key, const char *val, uint64_t lo,
                        uint64_t hi, uint64_t *out, char *err, size_t errlen)
{
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(val, &end, 10);
  uint64_t mult = 1;
  if (end && (*end == 'K' || *end == 'k')) mult = 1ULL << 10, end++;
  else if (end && (*end == 'M' || *end == 'm')) mult = 1ULL << 20, end++;
  else if (end && (*end == 'G' || *end == 'g')) mult = 1ULL << 30, end++;
  if (errno || end == val || *end != '\0' || val[0] == '-' ||
      (v && mult > UINT64_MAX / v) || v * mult < lo || v * mult > hi) {
    snprintf(err, errlen,
             "option %s=%s: expected an integer in [%llu, %llu]", key, val,
             (unsigned long long)lo, (unsigned long long)hi);
    return RM_ERR_INVALID_ARG;
  }
  *out = v * mult;
  return RM_OK;
}

rm_status_t rm__opt_double(const char *key, const char *val, double lo,
                           double hi, double *out, char *err, size_t errlen)
{
  char *end = NULL;
  errno = 0;
  double v = strtod(val, &end);
  if (errno || end == val || *end != '\0' || !isfinite(v) || v < lo ||
      v > hi) {
    snprintf(err, errlen, "option %s=%s: expected a number in [%g, %g]", key,
             val, lo, hi);
    return RM_ERR_INVALID_ARG;
  }
  *out = v;
  return RM_OK;
}
