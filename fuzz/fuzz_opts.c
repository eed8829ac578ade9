/*
 * fuzz_opts.c - libFuzzer target for the workload option parser
 * (common/rm_opts.c): rm__opt_next over the input as a NUL-terminated
 * string, then rm__opt_u64 / rm__opt_double on every value.
 *
 * Each input runs twice: with the buffer sizes the workloads use (key 64,
 * value 256, message 400) and with tiny ones derived from the input length,
 * so the over-long branches are reached. Buffers are heap blocks of exactly
 * that size, so ASan reports a write past any of them.
 *
 * Invariants (abort() on violation):
 *   1. a pair: *p moved forward and stays inside the string; key and value
 *      are NUL-terminated inside their buffers, trimmed of blanks; the key
 *      is non-empty and has no ',' or '=', the value no ','.
 *   2. the end: *p points at the terminating NUL. An error: the message is
 *      NUL-terminated and says something. The loop ends within len+1 calls.
 *   3. rm__opt_u64 / rm__opt_double: RM_OK only with a result in [lo, hi]
 *      (finite for doubles); RM_ERR_INVALID_ARG with a message otherwise.
 * FUZZ_OPTS_STRICT_KEYS=1 also checks the documented key grammar
 * [a-z0-9_]+ (rm_opts.h), which the parser does not enforce (it leaves
 * unknown keys, and so odd ones, to the workload).
 */
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_opts.h"

#ifndef FUZZ_OPTS_STRICT_KEYS
#define FUZZ_OPTS_STRICT_KEYS 0
#endif

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz_opts: invariant failed: %s (line %d)\n", #cond,   \
              __LINE__);                                                     \
      abort();                                                               \
    }                                                                        \
  } while (0)

static void check_trimmed(const char *s, size_t cap)
{
  size_t n;
  CHECK(memchr(s, '\0', cap) != NULL);
  n = strlen(s);
  if (n > 0) CHECK(!isspace((unsigned char)s[0]) && !isspace((unsigned char)s[n - 1]));
}

static void typed(const char *key, const char *val, char *err, size_t errlen)
{
  static const uint64_t ranges[][2] = {{0, UINT64_MAX}, {1, 1u << 20}, {0, 1u << 31}};
  static const double dranges[][2] = {{0, 100}, {0, 0.999999}, {1, 1e6}};
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
    uint64_t out = 0xdeadbeef;
    err[0] = '\0';
    rm_status_t st = rm__opt_u64(key, val, ranges[i][0], ranges[i][1], &out, err, errlen);
    if (st == RM_OK) {
      CHECK(out >= ranges[i][0] && out <= ranges[i][1]);
      CHECK(strchr(val, '-') == NULL); /* no negative number wraps around */
    } else {
      CHECK(st == RM_ERR_INVALID_ARG);
      CHECK(memchr(err, '\0', errlen) != NULL && (errlen == 1 || err[0] != '\0'));
      CHECK(out == 0xdeadbeef); /* OUT only on success */
    }
  }
  for (size_t i = 0; i < sizeof dranges / sizeof dranges[0]; i++) {
    double out = -7.0;
    err[0] = '\0';
    rm_status_t st = rm__opt_double(key, val, dranges[i][0], dranges[i][1], &out, err, errlen);
    if (st == RM_OK) {
      CHECK(isfinite(out) && out >= dranges[i][0] && out <= dranges[i][1]);
    } else {
      CHECK(st == RM_ERR_INVALID_ARG);
      CHECK(memchr(err, '\0', errlen) != NULL && (errlen == 1 || err[0] != '\0'));
      CHECK(out == -7.0);
    }
  }
}

static void run(const char *s, size_t len, size_t klen, size_t vlen, size_t errlen)
{
  char *key = malloc(klen), *val = malloc(vlen), *err = malloc(errlen);
  const char *p = s;
  size_t calls = 0;
  int r;

  if (key == NULL || val == NULL || err == NULL) goto out;
  for (;;) {
    const char *before = p;
    err[0] = '\0';
    r = rm__opt_next(&p, key, klen, val, vlen, err, errlen);
    CHECK(++calls <= len + 1);
    CHECK(p >= s && p <= s + len);
    if (r == 0) {
      CHECK(*p == '\0');
      break;
    }
    if (r < 0) {
      CHECK(r == -1);
      CHECK(memchr(err, '\0', errlen) != NULL && (errlen == 1 || err[0] != '\0'));
      break;
    }
    CHECK(r == 1 && p > before);
    CHECK(*p == ',' || *p == '\0');
    check_trimmed(key, klen);
    check_trimmed(val, vlen);
    CHECK(key[0] != '\0' && strpbrk(key, ",=") == NULL);
    CHECK(strchr(val, ',') == NULL);
    if (FUZZ_OPTS_STRICT_KEYS)
      CHECK(strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(key));
    typed(key, val, err, errlen);
  }
out:
  free(key);
  free(val);
  free(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *s = malloc(size + 1);
  if (s == NULL) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  size_t len = strlen(s);
  run(s, len, 64, 256, 400);                              /* as the workloads */
  run(s, len, 1 + size % 7, 1 + size % 13, 1 + size % 29); /* over-long paths */
  free(s);
  return 0;
}
