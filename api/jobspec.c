/*
 * jobspec.c - strict, table-driven job-spec parser (format in jobspec.h).
 *
 * The object is checked against one table of fields: the walk goes over the
 * object's keys (so an unknown key is caught by name), then over the table
 * (so a missing required key is caught). A field is a kind (string, int,
 * u64, options), a destination offset in rm_job_spec_t and its limits.
 * Nothing is written outside the destination buffers: strings are
 * length-checked against the field's size first, and Jansson refuses NUL
 * bytes inside strings (JSON_ALLOW_NUL is not passed), so C strings are
 * never silently truncated.
 *
 * command (K_ARGV) and env (K_ENV) are packed into their fixed arrays with
 * rm_job_spec_pack (coord.h); the sizes are checked there, the meaning
 * (required for workload command, key names) by rm_job_spec_validate.
 */
#include "jobspec.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_STRING, K_INT, K_U64, K_OPTIONS, K_ARGV, K_ENV, K_AGG, K_NUM } kind_t;

typedef struct field {
  const char *key;
  kind_t kind;
  size_t off;  /* into rm_job_spec_t */
  size_t size; /* destination size for strings */
  int64_t max; /* integers: 0..max */
  int required;
} field_t;

#define OFF(m) offsetof(rm_job_spec_t, m)
#define SZ(m) sizeof(((rm_job_spec_t *)0)->m)
#define STR(m) K_STRING, OFF(m), SZ(m), 0
#define INT(m, mx) K_INT, OFF(m), 0, (mx)
#define U64(m) K_U64, OFF(m), 0, ((int64_t)1 << 53)

static const field_t k_fields[] = {
    {"name", STR(name), 1},
    {"world_size", INT(world_size, 65536), 0},
    {"min_workers", INT(min_workers, 65536), 0},
    {"max_workers", INT(max_workers, 65536), 0},
    {"algorithm", STR(algorithm), 0},
    {"dtype", STR(dtype), 0},
    {"workload", STR(workload), 0},
    {"workload_options", K_OPTIONS, OFF(workload_options), SZ(workload_options), 0, 0},
    {"steps", U64(steps), 0},
    {"launcher", STR(launcher), 0},
    {"heartbeat_timeout_ms", INT(heartbeat_timeout_ms, INT32_MAX), 0},
    {"barrier_timeout_ms", INT(barrier_timeout_ms, INT32_MAX), 0},
    {"on_failure", STR(on_failure), 0},
    {"max_restarts", INT(max_restarts, INT32_MAX), 0},
    {"straggler_policy", STR(straggler_policy), 0},
    {"backup_workers", INT(backup_workers, INT32_MAX), 0},
    {"checkpoint_every", U64(checkpoint_every), 0},
    {"command", K_ARGV, OFF(command), SZ(command), RM_COORD_ARGV_MAX, 0},
    {"env", K_ENV, OFF(env), SZ(env), RM_COORD_ENV_MAX, 0},
    {"workdir", STR(workdir), 0},
    {"aggregation", K_AGG, 0, 0, 0, 0},
    {NULL, 0, 0, 0, 0, 0}};

/* The members of "aggregation" (issue 12), keys as the API names them; the
 * key in errors is "aggregation.<key>". The rules (method names, n against
 * f, m <= n - f, clip_norm >= 0, ...) are the coordinator's
 * (rm_job_spec_validate with rm_agg_check). */
static const field_t k_agg_fields[] = {
    {"method", STR(aggregation), 0},
    {"f", INT(aggregation_f, 65536), 0},
    {"m", INT(aggregation_m, 65536), 0},
    {"clip_norm", K_NUM, OFF(clip_norm), 0, 0, 0},
    {"tau", K_NUM, OFF(aggregation_tau), 0, 0, 0},
    {"iterations", INT(aggregation_iterations, 1000000), 0},
    {NULL, 0, 0, 0, 0, 0}};

static int fail(rm_api_spec_error_t *err, const char *code, const char *field, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));

static int fail(rm_api_spec_error_t *err, const char *code, const char *field, const char *fmt,
                ...)
{
  va_list ap;
  snprintf(err->code, sizeof err->code, "%s", code);
  snprintf(err->field, sizeof err->field, "%s", field);
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *type_name(const json_t *v)
{
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
  if (json_is_string(v)) {
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

  if (json_is_string(v)) {
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
    if (!json_is_string(item))
      return fail(err, "invalid_type", f->key, "%s must be a string, got %s", sub,
                  type_name(item));
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
    if (!json_is_string(item))
      return fail(err, "invalid_type", f->key, "%s must be a string, got %s", sub,
                  type_name(item));
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

/* {"method": "krum", "f": 1, ...}: every member optional, unknown ones
 * refused by name ("aggregation.mthod"). */
static int parse_aggregation(const json_t *v, const field_t *f, rm_job_spec_t *out,
                             rm_api_spec_error_t *err)
{
  const char *k;
  json_t *item;
  char sub[64];
  if (!json_is_object(v))
    return fail(err, "invalid_type", f->key, "%s must be an object ({\"method\": "
                "\"krum\", \"f\": 1, ...}), got %s", f->key, type_name(v));
  json_object_foreach((json_t *)v, k, item) {
    const field_t *a = k_agg_fields;
    while (a->key && strcmp(a->key, k) != 0) a++;
    snprintf(sub, sizeof sub, "%s.%.40s", f->key, k);
    if (a->key == NULL)
      return fail(err, "unknown_field", sub, "unknown field '%s' (aggregation has "
                  "method, f, m, clip_norm, tau and iterations)", sub);
    if (parse_field_as(a, sub, item, out, err) != 0) return -1;
  }
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
    if (!json_is_string(v))
      return fail(err, "invalid_type", f->key, "%s must be a string, got %s", f->key,
                  type_name(v));
    if (json_string_length(v) >= f->size)
      return fail(err, "invalid_value", f->key, "%s is longer than %zu characters", f->key,
                  f->size - 1);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
  case K_INT:
  case K_U64:
    if (!json_is_integer(v))
      return fail(err, "invalid_type", f->key, "%s must be an integer, got %s", f->key,
                  type_name(v));
    i = json_integer_value(v);
    if (i < 0 || i > f->max)
      return fail(err, "invalid_value", f->key, "%s must be in 0..%lld", f->key,
                  (long long)f->max);
    if (f->kind == K_INT) *(int *)dst = (int)i;
    else *(uint64_t *)dst = (uint64_t)i;
    return 0;
  case K_OPTIONS:
    return parse_options(v, f, out, err);
  case K_ARGV:
    return parse_argv(v, f, out, err);
  case K_ENV:
    return parse_env(v, f, out, err);
  case K_AGG:
    return parse_aggregation(v, f, out, err);
  case K_NUM:
    if (!json_is_number(v))
      return fail(err, "invalid_type", f->key, "%s must be a number, got %s", f->key,
                  type_name(v));
    *(double *)dst = json_number_value(v);
    return 0;
  }
  return fail(err, "invalid_value", f->key, "bad field table entry");
}

int rm__jobspec_parse(const char *body, size_t len, rm_job_spec_t *out, rm_api_spec_error_t *err)
{
  json_error_t jerr;
  json_t *root;
  const char *k;
  json_t *v;
  int rc = -1;

  memset(err, 0, sizeof *err);
  root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) {
    fail(err, "invalid_json", "", "malformed JSON at line %d column %d: %s", jerr.line,
         jerr.column, jerr.text);
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
      char shown[48];
      snprintf(shown, sizeof shown, "%s", k); /* field name may be attacker-long */
      fail(err, "unknown_field", shown, "unknown field '%s'", shown);
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
  rc = 0;
exit:
  json_decref(root);
  return rc;
}
