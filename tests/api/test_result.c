/*
 * test_result.c - job results in the coordinator (coordinator/result.c,
 * json_check.c), in one process, no gRPC client needed.
 *
 *   1. json_check against Jansson: a table of accepted and refused texts,
 *      then 20,000 random mutations of valid objects; whenever the checker
 *      accepts, Jansson (default flags) must parse the text to an object
 *      (what api/ relies on), and for the table both must give the same
 *      verdict.
 *   2. A real coordinator (temp SQLite file, gRPC on 127.0.0.1:0): a job with
 *      two members; a non-object and an oversized result are refused with a
 *      "result_refused" event; valid results are kept; settling picks rank
 *      0's, records "job_result" with the figures in words, and a rank that
 *      disagrees gives "result_mismatch"; rm_coord_job_result answers the
 *      text, RM_ERR_INVALID_ARG for a short buffer, RM_ERR_NOT_FOUND for an
 *      unknown job; after close and reopen on the same file the result is
 *      still there (loaded with the job).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core_int.h"

#include "coord_fixture.h"
#include "rm_testcheck.h"

static int jansson_object(const char *s)
{
  json_t *j = json_loads(s, 0, NULL);
  int ok = json_is_object(j);
  json_decref(j);
  return ok;
}

static int check(const char *s)
{
  return rm__json_check_object(s, strlen(s), NULL, NULL) == 0;
}

static void table(void)
{
  static const char *const good[] = {
      "{}", " { } ", "{\"a\":1}", "{\"accuracy\":0.9721,\"test_loss\":0.1076}",
      "{\"a\":[1,2,{\"b\":null}],\"c\":true,\"d\":false,\"e\":\"x\\n\\u00e9\"}",
      "{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}", "{\"n\":-0.5e-3}",
      "{\"n\":1E+2}", "{\"a\":\"\\ud83d\\ude00\"}", "{\"a\":{}}\n",
      "{\"i\":9223372036854775807}", "{\"r\":1e-400}", "{\"a\":{\"a\":1},\"a\":2}"};
  static const char *const bad[] = {
      "", "[]", "1", "\"x\"", "null", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}",
      "{a:1}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":+1}",
      "{\"a\":1e}", "{\"a\":tru}", "{\"a\":\"x}", "{\"a\":\"\x01\"}",
      "{\"a\":\"\\x\"}", "{\"a\":\"\\u00g0\"}", "{\"a\":\"\\u0000\"}",
      "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}", "{\"a\":\"\xc0\xaf\"}",
      "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xe2\x82\"}",
      "{} {}", "{}x", "{\"i\":9223372036854775808}", "{\"r\":1e400}",
      "{\"a\":[1,2}", "{\"a\":[1 2]}", "{\"a\":NaN}"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    CHECKF(check(good[i]), "refused valid %s", good[i]);
    CHECKF(jansson_object(good[i]), "jansson refuses %s", good[i]);
  }
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECKF(!check(bad[i]), "accepted invalid %s", bad[i]);
    CHECKF(!jansson_object(bad[i]), "jansson accepts %s", bad[i]);
  }
  /* depth: 32 levels accepted, 33 refused */
  for (int levels = 32; levels <= 33; levels++) {
    char deep[256] = "";
    for (int d = 0; d < levels; d++) strcat(deep, "{\"a\":");
    strcat(deep, "1");
    for (int d = 0; d < levels; d++) strcat(deep, "}");
    CHECKF(check(deep) == (levels == 32), "%d levels: verdict %d", levels, check(deep));
  }
}

static void mutations(void)
{
  static const char *const seeds[] = {
      "{\"accuracy\":0.972222,\"test_loss\":0.107654,\"test_samples\":360,"
      "\"param_checksum\":\"00ff00ff00ff00ff\"}",
      "{\"a\":[1,-2.5e3,{\"b\":[true,false,null]}],\"s\":\"caf\xc3\xa9\\u20ac\\\"\"}"};
  static const char alphabet[] = "{}[]:,\"\\01-+.eE \tuabnfrt\x01\x80\xc3\xe9\xed\xf4";
  unsigned seed = 12345;
  int accepted = 0;
  for (int it = 0; it < 20000; it++) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", seeds[it % 2]);
    size_t n = strlen(buf);
    int edits = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 3;
    for (int e = 0; e < edits && n > 1; e++) {
      size_t at = ((seed = seed * 1103515245u + 12345u) >> 16) % n;
      unsigned op = (seed >> 8) % 3;
      char ch = alphabet[(seed >> 4) % (sizeof alphabet - 1)];
      if (op == 0) buf[at] = ch;                               /* replace */
      else if (op == 1) memmove(buf + at, buf + at + 1, n-- - at); /* delete */
      else if (n + 1 < sizeof buf) {                           /* insert */
        memmove(buf + at + 1, buf + at, n - at + 1);
        buf[at] = ch;
        n++;
      }
    }
    if (check(buf)) {
      accepted++;
      CHECKF(jansson_object(buf), "checker accepts what Jansson refuses: %s", buf);
    }
  }
  printf("mutations: %d of 20000 accepted, all parsed by Jansson\n", accepted);
}

static int has_event(rm_coord_t *c, uint64_t job, const char *kind, const char *needle)
{
  rm_event_t *ev = NULL;
  size_t n = 0;
  int found = 0;
  rm_coord_events(c, job, 0, 1000, &ev, &n);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(ev[i].kind, kind) && (!needle || strstr(ev[i].message, needle))) {
      printf("  event %s: %s\n", ev[i].kind, ev[i].message);
      found++;
    }
  rm_coord_free(ev);
  return found;
}

static rm__worker_t *member(rm_coord_t *c, rm__job_t *j, int rank)
{
  rm__worker_t *w = rm__job_worker_add(j);
  char host[16];
  snprintf(host, sizeof host, "h%d", rank);
  rm__worker_strs(w, host, NULL, NULL, NULL);
  w->rank = rank;
  w->state = RM_WORKER_RUNNING;
  rm__store_worker_insert(c->store, j, w);
  return w;
}

static void coordinator(void)
{
  char dir[] = "/tmp/rm-result-XXXXXX", db[64], buf[RM_COORD_RESULT_MAX], small[8];
  int rank = 7;
  rm_job_spec_t spec;
  rm_job_info_t info;
  CHECKF(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(db, sizeof db, "%s/rm.db", dir);
  rm_coord_t *c = open_coord(db);
  if (!c) return;
  rm_job_spec_init(&spec);
  snprintf(spec.name, sizeof spec.name, "result-test");
  spec.world_size = 3;
  snprintf(spec.launcher, sizeof spec.launcher, "none");
  CHECKF(rm_coord_submit(c, &spec, &info, NULL) == RM_OK, "submit");
  CHECKF(rm_coord_job_result(c, info.id, buf, sizeof buf, &rank) == RM_OK && buf[0] == 0 &&
            rank == -1, "no result yet: '%s' rank %d", buf, rank);
  CHECKF(rm_coord_job_result(c, 999, buf, sizeof buf, NULL) == RM_ERR_NOT_FOUND, "unknown job");

  rm__lock(c);
  rm__job_t *j = rm__job_find(c, info.id);
  rm__worker_t *w0 = member(c, j, 0), *w1 = member(c, j, 1), *w2 = member(c, j, 2);
  (void)w0, (void)w1, (void)w2;
  j->members = calloc(3, sizeof *j->members);
  for (int r = 0; r < 3; r++) j->members[r] = r;
  j->nmembers = 3;
  char *big = malloc(RM_COORD_RESULT_MAX + 16);
  memset(big, ' ', RM_COORD_RESULT_MAX + 15);
  big[0] = '{';
  big[RM_COORD_RESULT_MAX + 14] = '}';
  big[RM_COORD_RESULT_MAX + 15] = 0;
  rm__result_offer(c, j, &j->w[2], big);
  rm__result_offer(c, j, &j->w[2], "[0.97]");
  rm__result_offer(c, j, &j->w[1], "{\"accuracy\":0.9721,\"test_loss\":0.2,\"steps\":200}");
  rm__result_offer(c, j, &j->w[0], "{\"accuracy\":0.9721,\"test_loss\":0.1076,\"steps\":200}");
  CHECKF(rm__worker_cold_get(&j->w[2])->result == NULL, "refused result kept");
  rm__result_settle(c, j);
  rm__commit(c);
  free(big);

  CHECKF(has_event(c, info.id, "result_refused", "over the 4095-byte limit") == 1, "size refusal");
  CHECKF(has_event(c, info.id, "result_refused", "a JSON object is required") == 1, "shape refusal");
  CHECKF(has_event(c, info.id, "result_mismatch", "rank 1 reports test_loss 0.2") == 1,
        "mismatch event");
  CHECKF(has_event(c, info.id, "job_result", "accuracy 0.9721, test loss 0.1076, steps 200") == 1,
        "job_result in words");
  CHECKF(rm_coord_job_result(c, info.id, buf, sizeof buf, &rank) == RM_OK && rank == 0 &&
            !strcmp(buf, "{\"accuracy\":0.9721,\"test_loss\":0.1076,\"steps\":200}"),
        "result '%s' rank %d", buf, rank);
  CHECKF(rm_coord_job_result(c, info.id, small, sizeof small, NULL) == RM_ERR_INVALID_ARG,
        "short buffer");
  rm_coord_close(c);

  /* reopen: the job is still active (loaded) and keeps its result */
  c = open_coord(db);
  if (c) {
    rank = -1;
    CHECKF(rm_coord_job_result(c, info.id, buf, sizeof buf, &rank) == RM_OK && rank == 0 &&
              strstr(buf, "0.1076"), "after reopen: '%s' rank %d", buf, rank);
    rm_coord_close(c);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECKF(system(cmd) == 0, "cleanup");
}

int main(void)
{
  table();
  mutations();
  coordinator();
  return rm_check_exit("test_result");
}
