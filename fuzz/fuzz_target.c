/*
 * fuzz_target.c - libFuzzer target for the HTTP request-target decoder
 * (api/target.c): rm__req_parse_target on a NUL-terminated copy of the
 * input (MHD hands the target over as a C string), then rm__req_query on
 * every decoded name.
 *
 * Invariants checked (abort() on violation; the design comment at the top of
 * api/target.c and the field comments of rm__req_t promise them):
 *   1. refused: status 400 or 414 with a code, NUL-terminated field and
 *      message; url == path == "" (it never reaches a handler); 414 only
 *      for a target over RM__URI_MAX bytes, which is always refused.
 *   2. accepted: url == path; the path and every query name and value is
 *      NUL-free (by construction), has no control character (< 0x20, 0x7f)
 *      and is valid UTF-8 (checked here by an independent decoder); at most
 *      RM__QUERY_MAX parameters, no name twice; rm__req_query finds each
 *      name's own value.
 *   3. an accepted target re-encoded (every byte but [A-Za-z0-9] as %XX)
 *      decodes to the same path and parameters (when it still fits).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz_target: invariant failed: %s (line %d)\n", #cond, \
              __LINE__);                                                     \
      abort();                                                               \
    }                                                                        \
  } while (0)

/* Independent UTF-8 check (RFC 3629): shortest form, no surrogates,
 * nothing past U+10FFFF. */
static int utf8_ok(const unsigned char *s)
{
  while (*s) {
    unsigned c = *s;
    int n;
    uint32_t cp;
    if (c < 0x80) {
      s++;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf) n = 1, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) n = 2, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) n = 3, cp = c & 0x07;
    else return 0;
    for (int k = 1; k <= n; k++) {
      if ((s[k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[k] & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    s += n + 1;
  }
  return 1;
}

static int clean(const char *s)
{
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7f) return 0;
  return utf8_ok((const unsigned char *)s);
}

static void req_release(rm__req_t *req)
{
  for (size_t i = 0; i < req->nquery; i++) {
    free(req->query[i].name);
    free(req->query[i].value);
  }
  free(req->query);
  free(req->path);
}

static int terminated(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

/* Append s percent-encoded (all but [A-Za-z0-9]) to out[*o..]. */
static void encode(char *out, size_t *o, const char *s)
{
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
      out[(*o)++] = (char)*p;
    } else {
      out[(*o)++] = '%';
      out[(*o)++] = hex[*p >> 4];
      out[(*o)++] = hex[*p & 15];
    }
  }
}

/* Invariant 3: re-encode req's decoded target, parse it again, compare. */
static void check_reencoded(rm__req_t *req)
{
  size_t need = 3 * strlen(req->path) + 2, o = 0;
  for (size_t i = 0; i < req->nquery; i++)
    need += 3 * (strlen(req->query[i].name) + strlen(req->query[i].value)) + 2;
  if (need > RM__URI_MAX) return;
  char *t = malloc(need + 1);
  if (t == NULL) return;
  encode(t, &o, req->path);
  for (size_t i = 0; i < req->nquery; i++) {
    t[o++] = i == 0 ? '?' : '&';
    encode(t, &o, req->query[i].name);
    t[o++] = '=';
    encode(t, &o, req->query[i].value);
  }
  t[o] = '\0';
  rm__req_t again;
  memset(&again, 0, sizeof again);
  rm__req_parse_target(&again, t);
  CHECK(again.refused.status == 0);
  CHECK(strcmp(again.path, req->path) == 0);
  CHECK(again.nquery == req->nquery);
  for (size_t i = 0; i < req->nquery; i++) {
    CHECK(strcmp(again.query[i].name, req->query[i].name) == 0);
    CHECK(strcmp(again.query[i].value, req->query[i].value) == 0);
  }
  req_release(&again);
  free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  rm__req_t req;
  char *raw = malloc(size + 1);
  if (raw == NULL) return 0;
  memcpy(raw, data, size);
  raw[size] = '\0'; /* an embedded NUL ends the target, as in a C string */
  size_t rawlen = strlen(raw);

  memset(&req, 0, sizeof req);
  rm__req_parse_target(&req, raw);
  CHECK(req.path != NULL);
  CHECK(req.url == req.path);

  if (req.refused.status != 0) {
    CHECK(req.url[0] == '\0');
    CHECK(req.refused.status == 400 || req.refused.status == 414);
    CHECK(req.refused.code != NULL && req.refused.code[0] != '\0');
    CHECK(terminated(req.refused.field, sizeof req.refused.field));
    CHECK(terminated(req.refused.message, sizeof req.refused.message));
    CHECK(req.refused.message[0] != '\0');
    CHECK((req.refused.status == 414) == (rawlen > RM__URI_MAX));
    CHECK(req.nquery <= RM__QUERY_MAX);
  } else {
    CHECK(rawlen <= RM__URI_MAX);
    CHECK(clean(req.path));
    CHECK(req.nquery <= RM__QUERY_MAX);
    CHECK(req.nquery == 0 || req.query != NULL);
    for (size_t i = 0; i < req.nquery; i++) {
      CHECK(req.query[i].name != NULL && req.query[i].value != NULL);
      CHECK(clean(req.query[i].name));
      CHECK(clean(req.query[i].value));
      CHECK(rm__req_query(&req, req.query[i].name) == req.query[i].value);
    }
    /* a raw target without escapes decodes to itself */
    if (strpbrk(raw, "%+") == NULL) {
      size_t plen = strcspn(raw, "?");
      CHECK(strlen(req.path) == plen && memcmp(req.path, raw, plen) == 0);
    }
    check_reencoded(&req);
  }
  /* a name nobody gave is absent (control characters are never decoded) */
  CHECK(rm__req_query(&req, "\x01") == NULL);
  req_release(&req);
  free(raw);
  return 0;
}
