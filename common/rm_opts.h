/*
 * rm_opts.h - workload option strings: the grammar of a job spec's
 * `options` field, parsed in one place for every built-in workload.
 *
 *   options := "" | pair ("," pair)*
 *   pair    := key "=" value        key: [a-z0-9_]+, value: no ','
 *
 * Blanks around keys and values are ignored, empty pairs skipped. Unknown
 * keys are the caller's business (each workload refuses them by name):
 *
 *   const char *p = options;
 *   while ((r = rm__opt_next(&p, key, sizeof key, val, sizeof val, err, n)) > 0)
 *     ...set_option(key, val)...
 *   if (r < 0) ...err says which pair...
 */
#ifndef RM_COMMON_OPTS_H
#define RM_COMMON_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/status.h"

/* Split off the next "key=value" pair from *p (advancing it) into key/val;
 * return 1 for a pair, 0 at the end, -1 on a malformed or over-long pair
 * (err filled: "option 'x': expected key=value", "...: bad or over-long
 * key", "option 'k': value too long (max N)"). */
int rm__opt_next(const char **p, char *key, size_t klen, char *val,
                 size_t vlen, char *err, size_t errlen);
/* Parse helpers: fill err naming `key` and return RM_ERR_INVALID_ARG when
 * val is not a number in [lo, hi]. u64 accepts K/M/G (powers of 1024). */
rm_status_t rm__opt_u64(const char *key, const char *val, uint64_t lo,
                        uint64_t hi, uint64_t *out, char *err, size_t errlen);
rm_status_t rm__opt_double(const char *key, const char *val, double lo,
                           double hi, double *out, char *err, size_t errlen);

#endif
