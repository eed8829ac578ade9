/*
 * test_core.c - unit tests of api/ pieces that need no server: the strict
 * job-spec parser (every refusal names its field), the Prometheus writer
 * (format details; the CTest "api_prom_promtool" runs promtool on its
 * output), constant-time token compare and bearer parsing, the streaming
 * JSON writer (round trip through Jansson, escapes, invalid UTF-8).
 *
 *   test_api_core            run the checks
 *   test_api_core --prom     print a sample exposition for promtool
 */
#include <jansson.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "jobspec.h"
#include "jsonw.h"
#include "prom.h"


#include "rm_testcheck.h"

static void expect_refused(const char *body, const char *code, const char *field)
{
  rm_job_spec_t s;
  rm_api_spec_error_t e;
  memset(&s, 0, sizeof s);
  int rc = rm__jobspec_parse(body, strlen(body), &s, &e);
  if (rc != -1 || strcmp(e.code, code) != 0 || strcmp(e.field, field) != 0) {
    fprintf(stderr, "spec %s: want %s/%s, got rc %d %s/%s (%s)\n", body, code, field, rc, e.code,
            e.field, e.message);
    rm_check_failures++;
  }
  rm__jobspec_error_free(&e);
}

/* error.field is the member as sent, whole: a 300-byte unknown name (top
 * level or inside an object member) comes back entire. */
static void test_long_field(void)
{
  char name[301], body[512];
  memset(name, 'k', 300);
  name[300] = '\0';
  snprintf(body, sizeof body, "{\"name\":\"a\",\"%s\":1}", name);
  expect_refused(body, "unknown_field", name);
  snprintf(body, sizeof body, "{\"name\":\"a\",\"aggregation\":{\"%s\":1}}", name);
  char sub[320];
  snprintf(sub, sizeof sub, "aggregation.%s", name);
  expect_refused(body, "unknown_field", sub);
}

static void test_jobspec(void)
{
  rm_job_spec_t s;
  rm_api_spec_error_t e;
  const char *ok = "{\"name\":\"dp-4\",\"world_size\":4,\"algorithm\":\"ring\",\"dtype\":\"f32\","
                   "\"workload\":\"allreduce\",\"workload_options\":{\"count\":1024,\"lr\":0.5,"
                   "\"verify\":true,\"mode\":\"fast\"},\"steps\":50,\"launcher\":\"none\","
                   "\"heartbeat_timeout_ms\":3000,\"barrier_timeout_ms\":9000}";
  memset(&s, 0, sizeof s);
  CHECK(rm__jobspec_parse(ok, strlen(ok), &s, &e) == 0);
  CHECK(strcmp(s.name, "dp-4") == 0);
  CHECK(s.world_size == 4 && s.steps == 50 && s.heartbeat_timeout_ms == 3000);
  CHECK(strcmp(s.workload_options, "count=1024,lr=0.5,verify=1,mode=fast") == 0);
  CHECK(strcmp(s.launcher, "none") == 0 && strcmp(s.algorithm, "ring") == 0);

  memset(&s, 0, sizeof s);
  CHECK(rm__jobspec_parse("{\"name\":\"x\",\"workload_options\":\"a=1,b=2\"}", 41, &s, &e) == 0);
  CHECK(strcmp(s.workload_options, "a=1,b=2") == 0);

  expect_refused("", "invalid_json", "");
  expect_refused("{\"name\":", "invalid_json", "");
  expect_refused("[1,2]", "invalid_type", "");
  expect_refused("{}", "missing_field", "name");
  expect_refused("{\"name\":\"a\",\"colour\":1}", "unknown_field", "colour");
  expect_refused("{\"name\":\"a\",\"name\":\"b\"}", "invalid_json", "");
  expect_refused("{\"name\":7}", "invalid_type", "name");
  expect_refused("{\"name\":\"a\",\"world_size\":\"4\"}", "invalid_type", "world_size");
  expect_refused("{\"name\":\"a\",\"world_size\":2.5}", "invalid_type", "world_size");
  /* ranges are the coordinator's (rm_job_spec_validate, one place for REST
   * and gRPC; tests/api/test_strict_spec.py): this layer keeps what it read,
   * and a value no int holds as INT_MIN, which every range refuses */
  memset(&s, 0, sizeof s);
  const char *neg = "{\"name\":\"a\",\"world_size\":-1}";
  const char *big = "{\"name\":\"a\",\"world_size\":99999999999}";
  CHECK(rm__jobspec_parse(neg, strlen(neg), &s, &e) == 0);
  CHECK(s.world_size == -1);
  memset(&s, 0, sizeof s);
  CHECK(rm__jobspec_parse(big, strlen(big), &s, &e) == 0);
  CHECK(s.world_size == INT_MIN);
  expect_refused("{\"name\":\"a\",\"steps\":true}", "invalid_type", "steps");
  expect_refused("{\"name\":\"a\",\"algorithm\":null}", "invalid_type", "algorithm");
  expect_refused("{\"name\":\"a\",\"workload_options\":[1]}", "invalid_type", "workload_options");
  expect_refused("{\"name\":\"a\",\"workload_options\":{\"x\":[1]}}", "invalid_type",
                 "workload_options.x");
  expect_refused("{\"name\":\"a\",\"workload_options\":{\"x\":\"a,b\"}}", "invalid_value",
                 "workload_options.x");
  expect_refused("{\"name\":\"a\",\"workload_options\":{\"bad key\":1}}", "invalid_value",
                 "workload_options.bad key");
  expect_refused("{\"name\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                 "aaaaaaa\"}", "invalid_value", "name");
  expect_refused("{\"name\":\"a\\u0000b\"}", "invalid_json", "");
}

static void test_prom(FILE *out)
{
  rm__sbuf_t b;
  const double le[] = {0.01, 0.1, 1};
  const uint64_t counts[] = {1, 2, 0, 3};
  rm__prom_hist_t h = {le, 3, counts, 9.5};
  const char *l[] = {"state", "run\"ning\\\n", NULL};
  char *text;

  rm__sbuf_init(&b);
  rm__prom_family(&b, "ringmaster_test_jobs", RM_PROM_GAUGE, "Jobs by state (help with \\).");
  rm__prom_sample(&b, "ringmaster_test_jobs", l, 3);
  rm__prom_family(&b, "ringmaster_test_bytes_total", RM_PROM_COUNTER, "Bytes.");
  rm__prom_sample(&b, "ringmaster_test_bytes_total", NULL, 1.5e12);
  rm__prom_family(&b, "ringmaster_test_ratio", RM_PROM_GAUGE, "A ratio.");
  rm__prom_sample(&b, "ringmaster_test_ratio", NULL, 0.25);
  rm__prom_sample(&b, "ringmaster_test_ratio", (const char *[]){"x", "nan", NULL}, NAN);
  rm__prom_family(&b, "ringmaster_test_seconds", RM_PROM_HISTOGRAM, "Step time.");
  rm__prom_histogram(&b, "ringmaster_test_seconds", NULL, &h);
  text = rm__sbuf_take(&b, NULL);
  if (out) {
    fputs(text, out);
  } else {
    CHECK(strstr(text, "# HELP ringmaster_test_jobs Jobs by state (help with \\\\).\n"));
    CHECK(strstr(text, "# TYPE ringmaster_test_jobs gauge\n"));
    CHECK(strstr(text, "ringmaster_test_jobs{state=\"run\\\"ning\\\\\\n\"} 3\n"));
    CHECK(strstr(text, "ringmaster_test_bytes_total 1500000000000\n"));
    CHECK(strstr(text, "ringmaster_test_ratio 0.25\n"));
    CHECK(strstr(text, "ringmaster_test_ratio{x=\"nan\"} NaN\n"));
    CHECK(strstr(text, "ringmaster_test_seconds_bucket{le=\"0.01\"} 1\n"));
    CHECK(strstr(text, "ringmaster_test_seconds_bucket{le=\"0.1\"} 3\n"));
    CHECK(strstr(text, "ringmaster_test_seconds_bucket{le=\"1\"} 3\n"));
    CHECK(strstr(text, "ringmaster_test_seconds_bucket{le=\"+Inf\"} 6\n"));
    CHECK(strstr(text, "ringmaster_test_seconds_sum 9.5\n"));
    CHECK(strstr(text, "ringmaster_test_seconds_count 6\n"));
  }
  free(text);
}

static void test_auth(void)
{
  char tok[RM_API_TOKEN_MAX + 1], err[256];
  int gen;
  CHECK(rm__ct_streq("secret", "secret"));
  CHECK(!rm__ct_streq("secret", "secreT"));
  CHECK(!rm__ct_streq("secret", "secre"));
  CHECK(!rm__ct_streq("secret", "secrets"));
  CHECK(!rm__ct_streq("secret", ""));
  /* the gRPC metadata form: bytes and a length, not NUL-terminated */
  CHECK(rm__ct_memeq("secret", "secretXYZ", 6));
  CHECK(!rm__ct_memeq("secret", "secretXYZ", 7));
  CHECK(!rm__ct_memeq("secret", "secre", 5));
  CHECK(!rm__ct_memeq("secret", "secreT", 6));
  CHECK(!rm__ct_memeq("secret", "", 0));
  CHECK(!rm__ct_memeq("sec", "sec\0", 4)); /* a NUL inside is not the end */
  CHECK(rm__auth_check("abc", "Bearer abc"));
  CHECK(rm__auth_check("abc", "bearer   abc"));
  CHECK(!rm__auth_check("abc", "Basic abc"));
  CHECK(!rm__auth_check("abc", "Bearer abd"));
  CHECK(!rm__auth_check("abc", NULL));
  CHECK(!rm__auth_check("", "Bearer "));
  unsetenv("RINGMASTER_API_TOKEN");
  unsetenv("RINGMASTER_API_TOKEN_FILE");
  CHECK(rm__auth_resolve("flag", NULL, tok, sizeof tok, &gen, err, sizeof err) == 0);
  CHECK(strcmp(tok, "flag") == 0 && gen == 0);
  setenv("RINGMASTER_API_TOKEN", "fromenv", 1);
  CHECK(rm__auth_resolve(NULL, NULL, tok, sizeof tok, &gen, err, sizeof err) == 0);
  CHECK(strcmp(tok, "fromenv") == 0 && gen == 0);
  unsetenv("RINGMASTER_API_TOKEN");
  CHECK(rm__auth_resolve(NULL, "/nonexistent/token", tok, sizeof tok, &gen, err, sizeof err) ==
        -1);
  CHECK(strstr(err, "/nonexistent/token") != NULL);
  CHECK(rm__auth_resolve(NULL, NULL, tok, sizeof tok, &gen, err, sizeof err) == 0);
  CHECK(gen == 1 && strlen(tok) == 32);
}

/* jsonw: what it writes parses back (Jansson) to the same values; invalid
 * UTF-8 becomes '?'; control characters, quotes, backslashes escaped. */
static void jw_roundtrip(const char *in, const char *want_value)
{
  rm__sbuf_t b;
  json_t *j;
  rm__sbuf_init(&b);
  rm__sbuf_puts(&b, "{");
  rm__jw_key(&b, "s");
  rm__jw_str(&b, in);
  rm__sbuf_puts(&b, ",");
  rm__jw_key(&b, "n");
  rm__jw_i64(&b, -9007199254740993LL);
  rm__sbuf_puts(&b, ",");
  rm__jw_key(&b, "u");
  rm__jw_u64(&b, 0);
  rm__sbuf_puts(&b, "}");
  j = json_loadb(b.data, b.len, 0, NULL);
  CHECK(j != NULL);
  CHECK(j && strcmp(json_string_value(json_object_get(j, "s")), want_value) == 0);
  CHECK(j && json_integer_value(json_object_get(j, "n")) == -9007199254740993LL);
  CHECK(j && json_integer_value(json_object_get(j, "u")) == 0);
  json_decref(j);
  rm__sbuf_free(&b);
}

static void test_jsonw(void)
{
  char all[128];
  for (int i = 1; i < 128; i++) all[i - 1] = (char)i;
  all[127] = '\0';
  jw_roundtrip("", "");
  jw_roundtrip("plain name-1.x", "plain name-1.x");
  jw_roundtrip("q\"b\\s/\n\r\t\b\f\x01\x1f\x7f", "q\"b\\s/\n\r\t\b\f\x01\x1f\x7f");
  jw_roundtrip(all, all);                                 /* every ASCII byte */
  jw_roundtrip("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  jw_roundtrip("bad \xff byte \xc3\xa9", "bad ? byte ??");   /* invalid -> every high byte '?' */
  jw_roundtrip("overlong \xc0\xaf", "overlong ??");
  jw_roundtrip("surrogate \xed\xa0\x80", "surrogate ???");
  jw_roundtrip("truncated \xe2\x82", "truncated ??");
  CHECK(rm__jw_utf8_valid("\xf4\x8f\xbf\xbf", 4));    /* U+10FFFF */
  CHECK(!rm__jw_utf8_valid("\xf4\x90\x80\x80", 4));   /* > U+10FFFF */
  {
    rm__sbuf_t b;
    rm__sbuf_init(&b);
    rm__jw_u64(&b, UINT64_MAX);
    CHECK(strcmp(b.data, "18446744073709551615") == 0);
    rm__sbuf_free(&b);
    rm__jw_i64(&b, INT64_MIN);
    CHECK(strcmp(b.data, "-9223372036854775808") == 0);
    rm__sbuf_free(&b);
  }
}

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "--prom") == 0) {
    test_prom(stdout);
    return 0;
  }
  test_jobspec();
  test_long_field();
  test_prom(NULL);
  test_auth();
  test_jsonw();
  return rm_check_exit("test_core");
}
