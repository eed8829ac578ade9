/*
 * json_check.c - the results workers send, checked with Jansson.
 *
 * A worker's Leave call carries its workload's summary; the coordinator
 * stores it as the worker's (and maybe the job's) result and api/ later
 * serves it. It is accepted only when Jansson's default decoding accepts it
 * as ONE JSON object (Jansson refuses, by itself: trailing text, invalid
 * UTF-8, "\u0000", lone surrogates, integers outside long long, reals that
 * overflow) and it nests at most RM__JSON_MAX_DEPTH levels (Jansson's own
 * limit is 2048; a result has no business being deeper, and the limit is
 * part of what the coordinator promises api/). Duplicate keys are accepted
 * as Jansson's default does (the last one wins).
 */
#include <jansson.h>
#include <string.h>

#include "core/core_int.h"

#define RM__JSON_MAX_DEPTH 32

/* Objects and arrays nest at most RM__JSON_MAX_DEPTH deep (v at `depth`). */
static int depth_ok(const json_t *v, int depth)
{
  if (!json_is_object(v) && !json_is_array(v)) return 1;
  if (depth > RM__JSON_MAX_DEPTH) return 0;
  if (json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x)
      if (!depth_ok(x, depth + 1)) return 0;
  } else if (json_is_array(v)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
      if (!depth_ok(x, depth + 1)) return 0;
  }
  return 1;
}

json_t *rm__json_object_parse(const char *s, size_t n, size_t *at, const char **why)
{
  json_error_t err;
  json_t *v = json_loadb(s, n, 0, &err);
  static __thread char text[JSON_ERROR_TEXT_LENGTH];
  if (!v) {
    if (at) *at = (size_t)err.position;
    snprintf(text, sizeof text, "%s", err.text);
    if (why) *why = text;
    return NULL;
  }
  if (!json_is_object(v) || !depth_ok(v, 1)) {
    if (at) *at = 0;
    if (why) *why = !json_is_object(v) ? "not an object" : "nested too deep";
    json_decref(v);
    return NULL;
  }
  return v;
}

int rm__json_check_object(const char *s, size_t n, size_t *at, const char **why)
{
  json_t *v = rm__json_object_parse(s, n, at, why);
  json_decref(v);
  return v ? 0 : -1;
}
