/*
 * jobspec.c - strict, table-driven job-spec parser (format and rules in
 * jobspec.h).
 *
 * The object is checked against one table of fields: the walk goes over the
 * object's keys (so an unknown key is caught by name), then over the table
 * (so a missing required key is caught). A field is a kind (string, name,
 * int, u64, options, ...), a destination offset in rm_job_spec_t and, for
 * strings, the destination size. Nothing is written outside the
 * destination buffers: strings are length-checked against the field's size
 * first and strings with NUL inside are refused, so C strings are never
 * silently truncated.
 *
 * What this layer decides and what it leaves to rm_job_spec_validate (the
 * coordinator, which serves gRPC too, so the rules live there once):
 *   here       JSON syntax, types, unknown/duplicate/missing keys, sizes,
 *              NUL, an empty string in a name field (REST only: protobuf
 *              cannot tell "" from omitted), algorithm aliases that do not
 *              fit the C field (stored canonical: "halving_doubling" ->
 *              "hd", from RM_ALGO_ALIAS_MAP, ringmaster/types.h)
 *   validate   which names exist (exact spelling), every integer range,
 *              the relations between fields
 * An integer the C field cannot hold is stored as INT_MIN (int) or
 * UINT64_MAX (u64); no range includes those, so validate refuses it with
 * the range that holds, the same words as for any other value out of range.
 *
 * Integers beyond 64 bits. Jansson refuses them while parsing ("numeric
 * overflow"), before any field is known. Then the body is parsed again
 * from a copy in which each such integer token is replaced by a marker
 * string containing a NUL ("\u0000big+" / "\u0000big-", parsed with
 * JSON_ALLOW_NUL): a marker cannot come from the client (the first parse
 * refuses NUL in strings), and the walk treats it as "an integer beyond
 * the 64-bit range" in whichever field holds it. A body refused for a NUL
 * in a string is parsed again the same way, so that the message names the
 * field (the code stays invalid_json, field "": malformed text). Library messages are not passed through; load_error maps
 * Jansson's error codes to words (only a syntax error keeps Jansson's
 * description of the token, which names JSON grammar, never a flag).
 *
 * command (K_ARGV) and env (K_ENV) are packed into their fixed arrays with
 * rm_job_spec_pack (coord.h); the sizes are checked there, the meaning
 * (required for workload command, key names) by rm_job_spec_validate.
 */
#include "jobspec.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringmaster/types.h"
#include "rm_alloc.h"

#if JANSSON_VERSION_HEX < 0x020b00
#error "api/jobspec.c needs Jansson 2.11 or newer (json_error_code)"
#endif

/* K_NAME: a string naming one of a list (algorithm, dtype, ...), not "";
 * which names exist is rm_job_spec_validate's rule. */
typedef enum { K_STRING, K_NAME, K_INT, K_U64, K_OPTIONS, K_ARGV, K_ENV, K_AGG, K_SECAGG, K_NUM, K_BOOL } kind_t;

typedef struct field {
  const char *key;
  kind_t kind;
  size_t off;  /* into rm_job_spec_t */
  size_t size; /* destination size for strings */
  int64_t max; /* command, env: entries */
  int required;
  /* K_NAME: the canonical spelling of an accepted alias, else NULL */
  const char *(*canon)(const char *);
} field_t;

/* "halving_doubling" -> "hd": the aliases of RM_ALGO_ALIAS_MAP
 * (ringmaster/types.h), exact spelling. A header list, not
 * rm_algo_parse_exact: this file is also built alone (api/fuzz). */
static const char *algo_canon(const char *s)
{
#define RM__CANON(alias, canonical) \
  if (strcmp(s, alias) == 0) return canonical;
  RM_ALGO_ALIAS_MAP(RM__CANON)
#undef RM__CANON
  return NULL;
}

#define OFF(m) offsetof(rm_job_spec_t, m)
#define SZ(m) sizeof(((rm_job_spec_t *)0)->m)
#define STR(m) K_STRING, OFF(m), SZ(m), 0
#define NAME(m) K_NAME, OFF(m), SZ(m), 0
#define INT(m) K_INT, OFF(m), 0, 0
#define U64(m) K_U64, OFF(m), 0, 0

static const field_t k_fields[] = {
    {"name", STR(name), 1, NULL},
    {"world_size", INT(world_size), 0, NULL},
    {"min_workers", INT(min_workers), 0, NULL},
    {"max_workers", INT(max_workers), 0, NULL},
    {"algorithm", NAME(algorithm), 0, algo_canon},
    {"dtype", NAME(dtype), 0, NULL},
    {"workload", NAME(workload), 0, NULL},
    {"workload_options", K_OPTIONS, OFF(workload_options), SZ(workload_options), 0, 0, NULL},
    {"steps", U64(steps), 0, NULL},
    {"launcher", NAME(launcher), 0, NULL},
    {"heartbeat_timeout_ms", INT(heartbeat_timeout_ms), 0, NULL},
    {"barrier_timeout_ms", INT(barrier_timeout_ms), 0, NULL},
    {"on_failure", NAME(on_failure), 0, NULL},
    {"max_restarts", INT(max_restarts), 0, NULL},
    {"straggler_policy", NAME(straggler_policy), 0, NULL},
    {"backup_workers", INT(backup_workers), 0, NULL},
    {"checkpoint_every", U64(checkpoint_every), 0, NULL},
    {"command", K_ARGV, OFF(command), SZ(command), RM_COORD_ARGV_MAX, 0, NULL},
    {"env", K_ENV, OFF(env), SZ(env), RM_COORD_ENV_MAX, 0, NULL},
    {"workdir", STR(workdir), 0, NULL},
    {"aggregation", K_AGG, 0, 0, 0, 0, NULL},
    {"deterministic", K_BOOL, OFF(deterministic), 0, 0, 0, NULL},
    {"max_staleness", INT(max_staleness), 0, NULL},
    {"secure_aggregation", K_SECAGG, 0, 0, 0, 0, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL}};

/* The members of "aggregation", keys as the API names them; the
 * key in errors is "aggregation.<key>". The rules (method names, n against
 * f, m <= n - f, clip_norm >= 0, ...) are the coordinator's
 * (rm_job_spec_validate with rm_agg_check). */
static const field_t k_agg_fields[] = {
    {"method", NAME(aggregation), 0, NULL},
    {"f", INT(aggregation_f), 0, NULL},
    {"m", INT(aggregation_m), 0, NULL},
    {"clip_norm", K_NUM, OFF(clip_norm), 0, 0, 0, NULL},
    {"tau", K_NUM, OFF(aggregation_tau), 0, 0, 0, NULL},
    {"iterations", INT(aggregation_iterations), 0, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL}};

/* The members of "secure_aggregation"; errors name
 * "secure_aggregation.<key>". The object's presence turns it on (bits 32
 * unless given); the rules and the other defaults are the coordinator's
 * (core/spec.c check_secure). */
static const field_t k_secagg_fields[] = {
    {"bits", INT(secagg_bits), 0, NULL},
    {"clip", K_NUM, OFF(secagg_clip), 0, 0, 0, NULL},
    {"scale", K_NUM, OFF(secagg_scale), 0, 0, 0, NULL},
    {"threshold", INT(secagg_threshold), 0, NULL},
    {"neighbours", NAME(secagg_neighbours), 0, NULL},
    {NULL, 0, 0, 0, 0, 0, NULL}};

static int fail(rm_api_spec_error_t *err, const char *code, const char *field, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));

static int fail(rm_api_spec_error_t *err, const char *code, const char *field, const char *fmt,
                ...)
{
  va_list ap;
  snprintf(err->code, sizeof err->code, "%s", code);
  free(err->field);
  err->field = rm__xstrdup(field);
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return -1;
}

/* +1 / -1 when v is the marker of an integer beyond the 64-bit range
 * (positive / negative; see the top of the file), else 0. */
static int big_sign(const json_t *v)
{
  if (!json_is_string(v) || json_string_length(v) != 5) return 0;
  if (memcmp(json_string_value(v), "\0big+", 5) == 0) return 1;
  if (memcmp(json_string_value(v), "\0big-", 5) == 0) return -1;
  return 0;
}

/* A string from the client (not a marker). */
static int is_text(const json_t *v) { return json_is_string(v) && !big_sign(v); }

/* A client string with a NUL inside (only the second parse lets one in). */
static int has_nul(const json_t *v)
{
  return is_text(v) && strlen(json_string_value(v)) != json_string_length(v);
}

/* A NUL inside a string: malformed for the whole body (invalid_json, field
 * "", as the first parse reports it), the message saying where. */
static int nul_error(rm_api_spec_error_t *err, const char *where)
{
  return fail(err, "invalid_json", "", "strings must not contain NUL (\\u0000): %s", where);
}

static const char *type_name(const json_t *v)
{
  if (big_sign(v)) return "an integer beyond the 64-bit range";
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

static int key_ok(const char *s)
{
  if (*s == '\0') return 0;
  for (; *s; s++) {
    char c = *s;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return 0;
  }
  return 1;
}

/* One option value as text; -1 (err filled) for a bad type or characters. */
static int option_value(const json_t *v, const char *path, char *val, size_t vlen,
                        rm_api_spec_error_t *err)
{
  if (has_nul(v)) return nul_error(err, path);
  if (is_text(v)) {
    const char *s = json_string_value(v);
    if (strpbrk(s, ",=") || json_string_length(v) >= vlen)
      return fail(err, "invalid_value", path, "%s must not contain ',' or '=' (max %zu chars)",
                  path, vlen - 1);
    snprintf(val, vlen, "%s", s);
  } else if (json_is_integer(v)) {
    snprintf(val, vlen, "%lld", (long long)json_integer_value(v));
  } else if (json_is_real(v)) {
    snprintf(val, vlen, "%.17g", json_real_value(v));
  } else if (json_is_boolean(v)) {
    snprintf(val, vlen, "%s", json_is_true(v) ? "1" : "0");
  } else if (big_sign(v)) {
    return fail(err, "invalid_value", path, "%s is an integer beyond the 64-bit range (give "
                "it as a string if the workload reads it so)", path);
  } else {
    return fail(err, "invalid_type", path, "%s must be a string, number or boolean, got %s", path,
                type_name(v));
  }
  return 0;
}

/* {"count": 1024, "lr": 0.1, "verify": true} -> "count=1024,lr=0.1,verify=1";
 * a string is taken as the k=v list itself. */
static int parse_options(const json_t *v, const field_t *f, rm_job_spec_t *out,
                         rm_api_spec_error_t *err)
{
  char *dst = (char *)out + f->off;
  const char *k;
  json_t *item;
  size_t used = 0;
  char sub[64], val[256];

  if (has_nul(v)) return nul_error(err, f->key);
  if (is_text(v)) {
    if (json_string_length(v) >= f->size)
      return fail(err, "invalid_value", f->key, "%s is longer than %zu characters", f->key,
                  f->size - 1);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
  }
  if (!json_is_object(v))
    return fail(err, "invalid_type", f->key, "%s must be an object or a string, got %s", f->key,
                type_name(v));
  json_object_foreach((json_t *)v, k, item) {
    int n;
    snprintf(sub, sizeof sub, "%s.%s", f->key, k);
    if (!key_ok(k))
      return fail(err, "invalid_value", sub, "option names use only letters, digits and '_'");
    if (option_value(item, sub, val, sizeof val, err) != 0) return -1;
    n = snprintf(dst + used, f->size - used, "%s%s=%s", used ? "," : "", k, val);
    if (n < 0 || (size_t)n >= f->size - used)
      return fail(err, "invalid_value", f->key, "%s is too long (max %zu chars as k=v list)",
                  f->key, f->size - 1);
    used += (size_t)n;
  }
  return 0;
}

/* ["python3", "train.py"] -> spec.command (packed, with its count). */
static int parse_argv(const json_t *v, const field_t *f, rm_job_spec_t *out,
                      rm_api_spec_error_t *err)
{
  char sub[48];
  size_t i;
  json_t *item;
  if (!json_is_array(v))
    return fail(err, "invalid_type", f->key, "%s must be an array of strings (the program "
                "and its arguments, no shell), got %s", f->key, type_name(v));
  if (json_array_size(v) > (size_t)f->max)
    return fail(err, "invalid_value", f->key, "%s has more than %lld arguments", f->key,
                (long long)f->max);
  out->command_argc = 0;
  json_array_foreach((json_t *)v, i, item) {
    snprintf(sub, sizeof sub, "%s[%zu]", f->key, i);
    if (!is_text(item))
      return fail(err, "invalid_type", f->key, "%s must be a string, got %s", sub,
                  type_name(item));
    if (has_nul(item))
      return nul_error(err, sub);
    if (rm_job_spec_pack(out->command, f->size, &out->command_argc, json_string_value(item),
                         json_string_length(item)))
      return fail(err, "invalid_value", f->key, "%s is longer than %zu bytes in all "
                  "(arguments plus one byte each)", f->key, f->size);
  }
  return 0;
}

/* {"OMP_NUM_THREADS": "4"} -> spec.env "KEY=VALUE" entries. Key rules are
 * the coordinator's (rm_job_spec_validate); here: types and sizes. */
static int parse_env(const json_t *v, const field_t *f, rm_job_spec_t *out,
                     rm_api_spec_error_t *err)
{
  char sub[64], *kv;
  const char *k;
  json_t *item;
  if (!json_is_object(v))
    return fail(err, "invalid_type", f->key, "%s must be an object of strings "
                "({\"KEY\": \"VALUE\"}), got %s", f->key, type_name(v));
  if (json_object_size(v) > (size_t)f->max)
    return fail(err, "invalid_value", f->key, "%s has more than %lld entries", f->key,
                (long long)f->max);
  out->env_count = 0;
  json_object_foreach((json_t *)v, k, item) {
    size_t kl = strlen(k), vl;
    snprintf(sub, sizeof sub, "%s.%.40s", f->key, k);
    if (!is_text(item))
      return fail(err, "invalid_type", f->key, "%s must be a string, got %s", sub,
                  type_name(item));
    if (has_nul(item))
      return nul_error(err, sub);
    vl = json_string_length(item);
    if (kl + vl + 2 > f->size)
      return fail(err, "invalid_value", f->key, "%s is longer than %zu bytes", f->key, f->size);
    kv = malloc(kl + vl + 2);
    if (!kv) return fail(err, "invalid_value", f->key, "out of memory");
    memcpy(kv, k, kl);
    kv[kl] = '=';
    memcpy(kv + kl + 1, json_string_value(item), vl);
    int rc = rm_job_spec_pack(out->env, f->size, &out->env_count, kv, kl + vl + 1);
    free(kv);
    if (rc)
      return fail(err, "invalid_value", f->key, "%s is longer than %zu bytes in all "
                  "(KEY=VALUE entries plus one byte each)", f->key, f->size);
  }
  return 0;
}

static int parse_field_as(const field_t *f, const char *key, const json_t *v,
                          rm_job_spec_t *out, rm_api_spec_error_t *err);

/* K_STRING and K_NAME into dst (f->size bytes). */
static int parse_string(const field_t *f, const json_t *v, char *dst, rm_api_spec_error_t *err)
{
  const char *s;
  size_t n;
  if (!is_text(v))
    return fail(err, "invalid_type", f->key, "%s must be a string, got %s", f->key,
                type_name(v));
  if (has_nul(v)) return nul_error(err, f->key);
  s = json_string_value(v);
  n = json_string_length(v);
  if (f->kind == K_NAME && n == 0)
    return fail(err, "invalid_value", f->key, "%s is empty: an omitted field takes the "
                "default; an empty string is not a value", f->key);
  if (f->kind == K_NAME && f->canon && f->canon(s)) {
    s = f->canon(s);
    n = strlen(s);
  }
  if (n >= f->size) {
    if (f->kind == K_NAME)
      return fail(err, "invalid_value", f->key, "%s: '%.24s...' is not an accepted value "
                  "(every one is shorter than %zu characters)", f->key, s, f->size);
    return fail(err, "invalid_value", f->key, "%s is longer than %zu characters", f->key,
                f->size - 1);
  }
  memcpy(dst, s, n + 1);
  return 0;
}

/* A nested object of members (aggregation, secure_aggregation): every
 * member optional, unknown ones refused by name ("aggregation.mthod");
 * example and names are the words of the refusals. */
static int parse_members(const json_t *v, const field_t *f, const field_t *members,
                         const char *example, const char *names, rm_job_spec_t *out,
                         rm_api_spec_error_t *err)
{
  const char *k;
  json_t *item;
  char sub[64];
  if (!json_is_object(v))
    return fail(err, "invalid_type", f->key, "%s must be an object (%s), got %s", f->key,
                example, type_name(v));
  json_object_foreach((json_t *)v, k, item) {
    const field_t *a = members;
    while (a->key && strcmp(a->key, k) != 0) a++;
    if (a->key == NULL) {
      size_t n = strlen(f->key) + strlen(k) + 2;
      char *whole = rm__xmalloc(n);
      snprintf(whole, n, "%s.%s", f->key, k);
      fail(err, "unknown_field", whole, "unknown field '%.80s%s' (%s has %s)", whole,
           strlen(whole) > 80 ? "..." : "", f->key, names);
      free(whole);
      return -1;
    }
    snprintf(sub, sizeof sub, "%s.%s", f->key, a->key);
    if (parse_field_as(a, sub, item, out, err) != 0) return -1;
  }
  return 0;
}

static int parse_aggregation(const json_t *v, const field_t *f, rm_job_spec_t *out,
                             rm_api_spec_error_t *err)
{
  return parse_members(v, f, k_agg_fields, "{\"method\": \"krum\", \"f\": 1, ...}",
                       "method, f, m, clip_norm, tau and iterations", out, err);
}

/* Present = on: bits 32 unless the object gives it. "bits": 0 is refused
 * here, REST only (as "" in a name field): in rm_job_spec_t and protobuf 0
 * means off, so validate could not tell it from an omitted object. */
static int parse_secagg(const json_t *v, const field_t *f, rm_job_spec_t *out,
                        rm_api_spec_error_t *err)
{
  out->secagg_bits = 32;
  if (parse_members(v, f, k_secagg_fields, "{\"bits\": 32, \"threshold\": 3, ...}",
                    "bits, clip, scale, threshold and neighbours", out, err) != 0)
    return -1;
  if (out->secagg_bits == 0)
    return fail(err, "invalid_value", "secure_aggregation.bits", "secure_aggregation.bits "
                "must be 32 or 64, got 0 (omit the secure_aggregation object to turn it "
                "off)");
  return 0;
}

static int parse_field(const field_t *f, const json_t *v, rm_job_spec_t *out,
                       rm_api_spec_error_t *err)
{
  return parse_field_as(f, f->key, v, out, err);
}

/* f's value v; errors name `key` (f->key, or "aggregation.f"). */
static int parse_field_as(const field_t *fd, const char *key, const json_t *v,
                          rm_job_spec_t *out, rm_api_spec_error_t *err)
{
  field_t named = *fd, *f = &named;
  char *dst = (char *)out + f->off;
  json_int_t i;
  named.key = key;

  switch (f->kind) {
  case K_STRING:
  case K_NAME:
    return parse_string(f, v, dst, err);
  case K_INT:
    if (!big_sign(v) && !json_is_integer(v))
      return fail(err, "invalid_type", f->key, "%s must be an integer, got %s", f->key,
                  type_name(v));
    i = big_sign(v) ? INT64_MIN : json_integer_value(v);
    *(int *)dst = i < INT_MIN || i > INT_MAX ? INT_MIN : (int)i; /* see the top */
    return 0;
  case K_U64:
    if (!big_sign(v) && !json_is_integer(v))
      return fail(err, "invalid_type", f->key, "%s must be an integer, got %s", f->key,
                  type_name(v));
    i = big_sign(v) ? -1 : json_integer_value(v);
    *(uint64_t *)dst = i < 0 ? UINT64_MAX : (uint64_t)i;
    return 0;
  case K_OPTIONS:
    return parse_options(v, f, out, err);
  case K_ARGV:
    return parse_argv(v, f, out, err);
  case K_ENV:
    return parse_env(v, f, out, err);
  case K_AGG:
    return parse_aggregation(v, f, out, err);
  case K_SECAGG:
    return parse_secagg(v, f, out, err);
  case K_NUM:
    if (big_sign(v))
      return fail(err, "invalid_value", f->key, "%s is beyond the 64-bit integer range "
                  "(write a large number with an exponent: 1e20)", f->key);
    if (!json_is_number(v))
      return fail(err, "invalid_type", f->key, "%s must be a number, got %s", f->key,
                  type_name(v));
    *(double *)dst = json_number_value(v);
    return 0;
  case K_BOOL:
    if (!json_is_boolean(v))
      return fail(err, "invalid_type", f->key, "%s must be true or false, got %s", f->key,
                  type_name(v));
    *(int *)dst = json_is_true(v);
    return 0;
  }
  return fail(err, "invalid_value", f->key, "bad field table entry");
}

/* A copy of body[0..len) in which every integer token beyond the 64-bit
 * range is the marker string (top of the file); never longer than body
 * (a marker is 12 bytes, such a token at least 19). NULL: out of memory. */
static char *mark_big_ints(const char *body, size_t len, size_t *out_len)
{
  char *o = malloc(len ? len : 1);
  size_t i = 0, n = 0;
  int in_str = 0;
  if (o == NULL) return NULL;
  while (i < len) {
    char c = body[i];
    if (in_str) {
      o[n++] = c;
      i++;
      if (c == '\\' && i < len) o[n++] = body[i++];
      else if (c == '"') in_str = 0;
      continue;
    }
    if (c == '"') in_str = 1;
    if (c != '-' && !(c >= '0' && c <= '9')) {
      o[n++] = c;
      i++;
      continue;
    }
    size_t j = i, d;
    int integer = 1, neg = c == '-';
    while (j < len && strchr("0123456789+-.eE", body[j]) && body[j]) {
      if (!(body[j] >= '0' && body[j] <= '9') && !(j == i && neg)) integer = 0;
      j++;
    }
    d = i + (size_t)neg;
    while (d + 1 < j && body[d] == '0') d++; /* leading zeros */
    if (integer && j > d &&
        (j - d > 19 || (j - d == 19 && memcmp(body + d, neg ? "9223372036854775808"
                                                            : "9223372036854775807", 19) > 0))) {
      memcpy(o + n, neg ? "\"\\u0000big-\"" : "\"\\u0000big+\"", 12);
      n += 12;
    } else {
      memcpy(o + n, body + i, j - i);
      n += j - i;
    }
    i = j;
  }
  *out_len = n;
  return o;
}

/* The key of a duplicate-key error: the string token that ends at byte
 * pos (where Jansson stops), decoded; "" when it cannot be found. */
static void dup_key(const char *body, size_t len, size_t pos, char *out, size_t out_len)
{
  size_t j;
  json_t *k;
  out[0] = '\0';
  if (pos < 2 || pos > len || body[pos - 1] != '"') return;
  for (j = pos - 1; j-- > 0;) {
    size_t bs = 0;
    while (bs < j && body[j - 1 - bs] == '\\') bs++;
    if (body[j] == '"' && bs % 2 == 0) break;
  }
  if (j == (size_t)-1) return;
  k = json_loadb(body + j, pos - j, JSON_DECODE_ANY, NULL);
  if (json_is_string(k)) snprintf(out, out_len, "%s", json_string_value(k));
  json_decref(k);
}

/* A body Jansson refused, in the project's words (field ""). */
static int load_error(const json_error_t *j, const char *body, size_t len,
                      rm_api_spec_error_t *err)
{
  char key[48];
  int l = j->line, c = j->column;
  switch (json_error_code(j)) {
  case json_error_invalid_utf8:
    return fail(err, "invalid_json", "", "the job spec is not valid UTF-8 (line %d column %d)",
                l, c);
  case json_error_premature_end_of_input:
    return fail(err, "invalid_json", "", "malformed JSON: the text ends at line %d column %d "
                "before the job spec does", l, c);
  case json_error_end_of_input_expected:
    return fail(err, "invalid_json", "", "malformed JSON: text after the job spec at line %d "
                "column %d", l, c);
  case json_error_null_character:
  case json_error_null_byte_in_key:
    return fail(err, "invalid_json", "", "strings and keys must not contain NUL (\\u0000): "
                "line %d column %d", l, c);
  case json_error_duplicate_key:
    dup_key(body, len, (size_t)j->position, key, sizeof key);
    return fail(err, "invalid_json", "", "key '%s' appears twice (line %d column %d)", key, l,
                c);
  case json_error_numeric_overflow:
    return fail(err, "invalid_json", "", "a number at line %d column %d is beyond the range "
                "of a double", l, c);
  case json_error_stack_overflow:
    return fail(err, "invalid_json", "", "malformed JSON: nested too deeply at line %d "
                "column %d", l, c);
  case json_error_out_of_memory:
    return fail(err, "invalid_json", "", "out of memory reading the job spec");
  case json_error_invalid_syntax:
    /* Jansson's words for the token ("':' expected near '1'"): JSON grammar. */
    return fail(err, "invalid_json", "", "malformed JSON at line %d column %d: %s", l, c,
                j->text);
  default:
    return fail(err, "invalid_json", "", "malformed JSON at line %d column %d", l, c);
  }
}

/* Parse; on an integer beyond 64 bits or a NUL in a string, parse the
 * marked copy (top of the file). *retried: the first parse's error code. */
static json_t *load(const char *body, size_t len, json_error_t *jerr, int *retried)
{
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, jerr);
  int code = root ? 0 : json_error_code(jerr);
  *retried = 0;
  if (code == json_error_numeric_overflow || code == json_error_null_character) {
    json_error_t again;
    size_t n = 0;
    char *marked = mark_big_ints(body, len, &n);
    if (marked) root = json_loadb(marked, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &again);
    free(marked);
    *retried = code;
  }
  return root;
}

void rm__jobspec_error_free(rm_api_spec_error_t *err)
{
  free(err->field);
  err->field = NULL;
}

int rm__jobspec_parse(const char *body, size_t len, rm_job_spec_t *out, rm_api_spec_error_t *err)
{
  json_error_t jerr;
  json_t *root;
  const char *k;
  json_t *v;
  int rc = -1, retried;

  memset(err, 0, sizeof *err);
  root = load(body, len, &jerr, &retried);
  if (root == NULL) {
    load_error(&jerr, body, len, err);
    goto exit;
  }
  if (!json_is_object(root)) {
    fail(err, "invalid_type", "", "the job spec must be a JSON object, got %s", type_name(root));
    goto exit;
  }
  json_object_foreach(root, k, v) {
    const field_t *f = k_fields;
    while (f->key && strcmp(f->key, k) != 0) f++;
    if (f->key == NULL) {
      /* The field whole (bounded by the body limit); the message shows the
       * start of a long one. */
      fail(err, "unknown_field", k, "unknown field '%.80s%s'", k, strlen(k) > 80 ? "..." : "");
      goto exit;
    }
    if (parse_field(f, v, out, err) != 0) goto exit;
  }
  for (const field_t *f = k_fields; f->key; f++) {
    if (f->required && json_object_get(root, f->key) == NULL) {
      fail(err, "missing_field", f->key, "field '%s' is required", f->key);
      goto exit;
    }
  }
  if (retried == json_error_null_character) { /* the NUL was where no field looks */
    load_error(&jerr, body, len, err);
    goto exit;
  }
  rc = 0;
exit:
  json_decref(root);
  return rc;
}
