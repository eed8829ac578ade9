/*
 * resp.c - how a handler answers: the response helpers (text, static bytes,
 * JSON, the JSON error of api/errors.h's codes), request headers, and the
 * canonical decimal ids of paths and queries. Used by every handler; the
 * server sends what they filled (http.c send_resp).
 */
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "errors.h"
#include "rm_alloc.h"
#include "rm_log.h"

void rm__resp_text(rm__resp_t *r, unsigned status, const char *ctype, char *heap_body,
                   size_t len)
{
  free(r->body);
  r->status = status;
  r->content_type = ctype;
  r->body = heap_body;
  r->len = len;
}

void rm__resp_static(rm__resp_t *r, const char *ctype, const void *data, size_t len)
{
  free(r->body);
  r->body = NULL;
  r->status = 200;
  r->content_type = ctype;
  r->persistent = data;
  r->len = len;
}

void rm__resp_json(rm__resp_t *r, unsigned status, json_t *j)
{
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (s == NULL) s = rm__xstrdup("{}");
  rm__resp_text(r, status, "application/json", s, strlen(s));
}

int rm__api_error_known(const char *code, unsigned status)
{
#define RM__X(c, s) if (strcmp(code, #c) == 0) return status == (s);
  RM__API_ERRORS(RM__X)
#undef RM__X
  return 0;
}

void rm__resp_error(rm__resp_t *r, unsigned status, const char *code, const char *field,
                    const char *fmt, ...)
{
  char msg[512];
  va_list ap;
  json_t *f;

  /* A client reads only what openapi.json documents (errors.h). */
  if (!rm__api_error_known(code, status))
    RM_ERROR("api: error code '%s' with status %u is not in api/errors.h", code, status);
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  f = (field && *field) ? json_string(field) : json_null();
  if (f == NULL) f = json_null(); /* field was not valid UTF-8 */
  rm__resp_json(r, status,
                json_pack("{s:{s:s,s:s,s:o}}", "error", "code", code, "message", msg, "field", f));
}

const char *rm__req_header(rm__req_t *req, const char *name)
{
  return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

int rm__parse_u64(const char *s, uint64_t *out)
{
  uint64_t v = 0;
  if (s == NULL || *s == '\0' || strlen(s) > 19) return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return 0;
}

int rm__parse_id(const char *s, uint64_t *out)
{
  /* One spelling per resource: "3", never "03", "+3" or " 3". */
  if (s == NULL || (s[0] == '0' && s[1] != '\0')) return -1;
  return rm__parse_u64(s, out);
}
