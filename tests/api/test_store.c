/*
 * test_store.c - the coordinator's job list over its statement cache and
 * in-memory job counts (coordinator/store/store.c), on a real coordinator with a
 * temp SQLite file, in one process.
 *
 *   - 60 jobs submitted, 20 cancelled, 10 failed: for every state filter
 *     (and none) the list's total equals the number of jobs in that state
 *     counted independently from the returned pages, pages are newest first
 *     without gaps or repeats, and rm_coord_counters' jobs_by_state agree;
 *   - the same after close and reopen on the same file (counts rebuilt from
 *     the table; cancelled/failed jobs are no longer loaded, so they come
 *     from SQLite only), and after more submits on the reopened coordinator;
 *   - 2,000 list calls in a row on the cached statements give the same
 *     answer every time (a statement left un-reset or a stale binding would
 *     show here; the sanitizer build also checks for leaks).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord.h"

#include "coord_fixture.h"
#include "rm_testcheck.h"

/* Walk every page of one filter (pages of 7): ids strictly decreasing, all
 * in the filtered state; returns how many, checks total on each page. */
static size_t walk(rm_coord_t *c, int state, size_t expect)
{
  rm_job_filter_t f = {state, 0, 7};
  size_t seen = 0;
  uint64_t last = UINT64_MAX;
  for (;;) {
    rm_job_info_t *jobs = NULL;
    size_t n = 0, total = 0;
    CHECKF(rm_coord_job_list(c, &f, &jobs, &n, &total) == RM_OK, "list");
    CHECKF(total == expect, "state %d: total %zu, want %zu", state, total, expect);
    for (size_t i = 0; i < n; i++) {
      CHECKF(jobs[i].id < last, "state %d: id %llu after %llu", state,
            (unsigned long long)jobs[i].id, (unsigned long long)last);
      CHECKF(state < 0 || (int)jobs[i].state == state, "state %d: job in state %d", state,
            jobs[i].state);
      last = jobs[i].id;
    }
    seen += n;
    rm_coord_free(jobs);
    if (n < f.limit) break;
    f.offset += n;
  }
  return seen;
}

static void check_all(rm_coord_t *c, const size_t *want, const char *when)
{
  rm_coord_counters_t ctr;
  size_t sum = 0;
  rm_coord_counters(c, &ctr);
  for (int s = 0; s < RM_JOB_STATE_COUNT; s++) {
    CHECKF(walk(c, s, want[s]) == want[s], "%s: state %d listed", when, s);
    CHECKF(ctr.jobs_by_state[s] == want[s], "%s: counter state %d = %llu, want %zu", when, s,
          (unsigned long long)ctr.jobs_by_state[s], want[s]);
    sum += want[s];
  }
  CHECKF(walk(c, -1, sum) == sum, "%s: all listed", when);
}

int main(void)
{
  char dir[] = "/tmp/rm-store-XXXXXX", db[64], cmd[128];
  size_t want[RM_JOB_STATE_COUNT] = {0};
  uint64_t ids[60];
  CHECKF(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(db, sizeof db, "%s/rm.db", dir);
  rm_coord_t *c = open_coord(db);
  if (!c) return 1;
  for (int i = 0; i < 60; i++) ids[i] = submit_named(c, "store", i);
  for (int i = 0; i < 20; i++) CHECKF(rm_coord_job_cancel(c, ids[3 * i], NULL) == RM_OK, "cancel");
  for (int i = 0; i < 10; i++) CHECKF(rm_coord_job_fail(c, ids[3 * i + 1], "test") == RM_OK, "fail");
  CHECKF(rm_coord_job_cancel(c, ids[0], NULL) == RM_ERR_DENIED, "cancel twice");
  want[RM_JOB_PENDING] = 30;
  want[RM_JOB_CANCELLED] = 20;
  want[RM_JOB_FAILED] = 10;
  check_all(c, want, "first run");

  rm_job_filter_t any = {-1, 0, 100};
  rm_job_info_t *first = NULL;
  size_t n0 = 0, t0 = 0;
  rm_coord_job_list(c, &any, &first, &n0, &t0);
  for (int i = 0; i < 2000; i++) {
    rm_job_info_t *jobs = NULL;
    size_t n = 0, total = 0;
    rm_job_filter_t f = {i % 2 ? -1 : RM_JOB_CANCELLED, 0, 100};
    rm_coord_job_list(c, i % 2 ? &any : &f, &jobs, &n, &total);
    if (i % 2) {
      int same = n == n0 && total == t0;
      for (size_t k = 0; same && k < n; k++)
        same = jobs[k].id == first[k].id && jobs[k].state == first[k].state &&
               !strcmp(jobs[k].spec.name, first[k].spec.name);
      CHECKF(same, "repeat %d differs", i);
    }
    else
      CHECKF(n == 20 && total == 20, "repeat %d: cancelled %zu/%zu", i, n, total);
    rm_coord_free(jobs);
  }
  rm_coord_free(first);
  rm_coord_close(c);

  c = open_coord(db);
  if (!c) return 1;
  check_all(c, want, "after reopen");
  for (int i = 0; i < 5; i++) submit_named(c, "store", 100 + i);
  CHECKF(rm_coord_job_cancel(c, ids[2], NULL) == RM_OK, "cancel after reopen");
  want[RM_JOB_PENDING] += 5 - 1;
  want[RM_JOB_CANCELLED] += 1;
  check_all(c, want, "after reopen + changes");
  rm_coord_close(c);

  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECKF(system(cmd) == 0, "cleanup");
  return rm_check_exit("test_store");
}
