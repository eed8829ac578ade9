/*
 * target.c - the HTTP request target: path and query, decoded once
 * (http.c calls rm__req_parse_target from MHD's URI log callback).
 *
 * The request target (RFC 3986), decoded exactly once, here:
 *   1. MHD hands the raw target to the URI log callback before it touches
 *      it; we copy it and cut MHD's query off at the '?' (the callback may
 *      process the URI before it is parsed), so MHD parses no arguments:
 *      no per-parameter records in its 64 KiB connection pool, which a few
 *      hundred parameters used to exhaust (no answer at all).
 *   2. Path and each query name/value are percent-decoded ('+' is a space
 *      in the query only). Refused with 400 invalid_request, field "path"
 *      or the parameter's name ("query" when the name itself is bad): raw
 *      space or control character, '%' without two hex digits, %00 or any
 *      decoded control character, invalid UTF-8 (overlong, surrogate,
 *      > U+10FFFF). More than RM__QUERY_MAX parameters -> 400
 *      too_many_parameters; a parameter given twice -> 400 invalid_request;
 *      a target over RM__URI_MAX bytes -> 414 uri_too_long.
 *   3. A refused target is answered on the first access call, before
 *      routing or auth: it never reaches a handler.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "rm_alloc.h"

const char *rm__req_query(rm__req_t *req, const char *name)
{
  for (size_t i = 0; i < req->nquery; i++)
    if (strcmp(req->query[i].name, name) == 0) return req->query[i].value;
  return NULL;
}

/* 1 when s[0..n) is well-formed UTF-8 (no overlong forms, no surrogates,
 * nothing past U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n)
{
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      i++;
      continue;
    }
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n - i < len) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += len;
  }
  return 1;
}

static int hex_val(char c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decode src[0..n) into a new heap string; plus: '+' is a space
 * (query). NULL with *why set (a phrase: "has ...") when it cannot be
 * accepted. */
static char *uri_decode(const char *src, size_t n, int plus, const char **why)
{
  unsigned char *out = rm__xmalloc(n + 1);
  size_t o = 0;

  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)src[i];
    if (c <= 0x20 || c == 0x7f) {
      *why = "a raw space or control character";
      goto fail;
    }
    if (c == '%') {
      int hi = -1, lo = -1;
      if (i + 2 < n) {
        hi = hex_val(src[i + 1]);
        lo = hex_val(src[i + 2]);
      }
      if (hi < 0 || lo < 0) {
        *why = "a '%' not followed by two hex digits";
        goto fail;
      }
      c = (unsigned char)(hi << 4 | lo);
      i += 2;
      if (c == 0) {
        *why = "a NUL byte (%00)";
        goto fail;
      }
    } else if (plus && c == '+') {
      c = ' ';
    }
    if (c < 0x20 || c == 0x7f) {
      *why = "an encoded control character";
      goto fail;
    }
    out[o++] = c;
  }
  out[o] = '\0';
  if (!utf8_valid(out, o)) {
    *why = "invalid UTF-8 after decoding";
    goto fail;
  }
  return (char *)out;
fail:
  free(out);
  return NULL;
}

/* Mark the target refused (the first reason wins). */
static void refuse(rm__req_t *req, unsigned status, const char *code, const char *field,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void refuse(rm__req_t *req, unsigned status, const char *code, const char *field,
                   const char *fmt, ...)
{
  va_list ap;
  if (req->refused.status) return;
  req->refused.status = status;
  req->refused.code = code;
  snprintf(req->refused.field, sizeof req->refused.field, "%s", field ? field : "");
  va_start(ap, fmt);
  vsnprintf(req->refused.message, sizeof req->refused.message, fmt, ap);
  va_end(ap);
}

/* Decode the query q[0..n) into req->query; 0, or -1 when refused. */
static int parse_query(rm__req_t *req, const char *q, size_t n)
{
  size_t count = 0;
  const char *end = q + n, *seg;

  for (seg = q; seg < end;) { /* count first: never decode an unbounded list */
    const char *amp = memchr(seg, '&', (size_t)(end - seg));
    if ((amp ? amp : end) > seg) count++;
    seg = amp ? amp + 1 : end;
  }
  if (count > RM__QUERY_MAX) {
    refuse(req, 400, "too_many_parameters", "query",
           "at most %d query parameters are accepted (got %zu)", RM__QUERY_MAX, count);
    return -1;
  }
  req->query = count ? rm__xcalloc(count, sizeof *req->query) : NULL;
  for (seg = q; seg < end;) {
    const char *amp = memchr(seg, '&', (size_t)(end - seg)), *stop = amp ? amp : end;
    const char *eq = memchr(seg, '=', (size_t)(stop - seg)), *why = NULL;
    char *name, *value;

    if (stop == seg) {
      seg = stop + 1;
      continue;
    }
    name = uri_decode(seg, (size_t)((eq ? eq : stop) - seg), 1, &why);
    if (name == NULL) {
      refuse(req, 400, "invalid_request", "query", "a query parameter name has %s", why);
      return -1;
    }
    value = eq ? uri_decode(eq + 1, (size_t)(stop - eq - 1), 1, &why) : rm__xstrdup("");
    if (value == NULL || rm__req_query(req, name) != NULL) {
      if (value == NULL)
        refuse(req, 400, "invalid_request", name, "query parameter '%.64s' has %s", name, why);
      else
        refuse(req, 400, "invalid_request", name, "query parameter '%.64s' is given twice", name);
      free(name);
      free(value);
      return -1;
    }
    req->query[req->nquery].name = name;
    req->query[req->nquery++].value = value;
    seg = amp ? amp + 1 : end;
  }
  return 0;
}

void rm__req_parse_target(rm__req_t *req, const char *raw)
{
  size_t n = strlen(raw), plen;
  const char *q, *why = NULL;

  if (n > RM__URI_MAX) {
    refuse(req, 414, "uri_too_long", NULL, "the request target is %zu bytes; at most %d are "
           "accepted", n, RM__URI_MAX);
    goto refused;
  }
  q = memchr(raw, '?', n);
  plen = q ? (size_t)(q - raw) : n;
  req->path = uri_decode(raw, plen, 0, &why);
  if (req->path == NULL) {
    refuse(req, 400, "invalid_request", "path", "the path has %s", why);
    goto refused;
  }
  if (q && parse_query(req, q + 1, n - plen - 1) != 0) goto refused;
  req->url = req->path;
  return;
refused:
  free(req->path);
  req->path = rm__xstrdup("");
  req->url = req->path;
}
