/*
 * test_faults.c - a failed write is never acknowledged (coordinator/store
 * WRITE FAILURES, core/commit.c): the store's fault point (test builds,
 * RINGMASTER_TEST_STORE_FAIL's in-process form) fails the Nth write step
 * with SQLITE_FULL or SQLITE_IOERR, walked over every write step a
 * scripted life of jobs makes (submit four, cancel one, fail one, submit
 * one more, cancel it), one run per N on a fresh real SQLite file, until a
 * run meets no fault. In every run:
 *   - every call either succeeds or returns RM_ERR_UNAVAILABLE (never OK
 *     for a write that was rolled back); no id is handed out twice;
 *   - what the running coordinator shows (memory first, then the store)
 *     is, id for id, what a coordinator reopened on the file shows: no job
 *     only in memory, every acknowledged job stored in its acknowledged
 *     state; the counters say one failed commit and "writable" again
 *     after the next write.
 * Exit 77 (skip) when the build has no test hooks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord.h"
#include "rm_testcheck.h"
#include "rm_testhook.h"

#include "../api/coord_fixture.h"

#define NOPS 7
#define MAXID 16

typedef struct {
  uint64_t id[NOPS];       /* acknowledged submissions (0: refused) */
  int state[MAXID + 1];    /* acknowledged state per id, -1 unknown */
  int refused;
} run_t;

static rm_status_t submit(rm_coord_t *c, int i, uint64_t *id)
{
  rm_job_spec_t spec;
  rm_job_info_t info;
  rm_job_spec_init(&spec);
  snprintf(spec.name, sizeof spec.name, "fault-%d", i);
  spec.world_size = 2;
  snprintf(spec.launcher, sizeof spec.launcher, "none");
  memset(&info, 0, sizeof info);
  rm_status_t st = rm_coord_submit(c, &spec, &info, NULL);
  *id = st == RM_OK ? info.id : 0;
  CHECKF(st == RM_OK || st == RM_ERR_UNAVAILABLE, "submit: %s", rm_status_name(st));
  CHECKF(st != RM_OK || info.id != 0, "submit acknowledged without an id");
  return st;
}

static void ack_submit(rm_coord_t *c, run_t *r, int i)
{
  uint64_t id;
  if (submit(c, i, &id) != RM_OK) {
    r->refused++;
    return;
  }
  for (int k = 0; k < NOPS; k++) CHECKF(r->id[k] != id, "id %llu handed out twice",
                                        (unsigned long long)id);
  r->id[i] = id;
  if (id <= MAXID) r->state[id] = RM_JOB_PENDING;
}

static void ack_stop(rm_coord_t *c, run_t *r, uint64_t id, int fail)
{
  if (!id) return;
  rm_status_t st = fail ? rm_coord_job_fail(c, id, "test") : rm_coord_job_cancel(c, id, NULL);
  CHECKF(st == RM_OK || st == RM_ERR_UNAVAILABLE, "stop %llu: %s", (unsigned long long)id,
         rm_status_name(st));
  if (st == RM_OK) r->state[id] = fail ? RM_JOB_FAILED : RM_JOB_CANCELLED;
  else r->refused++;
}

/* The scripted life; returns how many calls were refused. */
static int script(rm_coord_t *c, run_t *r)
{
  memset(r, 0, sizeof *r);
  for (int i = 0; i <= MAXID; i++) r->state[i] = -1;
  for (int i = 0; i < 4; i++) ack_submit(c, r, i);
  ack_stop(c, r, r->id[1], 0);
  ack_stop(c, r, r->id[2], 1);
  ack_submit(c, r, 4);
  ack_stop(c, r, r->id[4], 0);
  return r->refused;
}

/* Existence and state of job id: -1 absent. */
static int shown(rm_coord_t *c, uint64_t id)
{
  rm_job_info_t info;
  rm_status_t st = rm_coord_job_get(c, id, &info);
  CHECKF(st == RM_OK || st == RM_ERR_NOT_FOUND, "get %llu: %s", (unsigned long long)id,
         rm_status_name(st));
  return st == RM_OK ? (int)info.state : -1;
}

static int one_run(const char *dir, uint64_t nth, int kind, int *faulted)
{
  char db[200], cmd[1024];
  int live[MAXID + 1];
  run_t r;
  snprintf(db, sizeof db, "%s/f%llu-%d.db", dir, (unsigned long long)nth, kind);
  rm_coord_t *c = open_coord(db);
  if (!c) return 1;
  rm__testhook_store_fail(nth, kind, 1);
  int refused = script(c, &r);
  rm__testhook_store_fail(0, RM__STORE_FAIL_NONE, 0);
  *faulted = refused > 0;
  rm_coord_counters_t ctr;
  rm_coord_counters(c, &ctr);
  if (refused) {
    CHECKF(ctr.store_commits_failed >= 1, "N=%llu: no failed commit counted",
           (unsigned long long)nth);
    CHECKF(rm_coord_store_state(c, NULL, 0) == RM_COORD_STORE_OK,
           "N=%llu: store not writable again after the fault", (unsigned long long)nth);
  }
  for (uint64_t id = 1; id <= MAXID; id++) {
    live[id] = shown(c, id);
    if (r.state[id] >= 0)
      CHECKF(live[id] == r.state[id], "N=%llu: job %llu in state %d, acknowledged %d",
             (unsigned long long)nth, (unsigned long long)id, live[id], r.state[id]);
  }
  rm_coord_close(c);
  c = open_coord(db);
  if (!c) return 1;
  for (uint64_t id = 1; id <= MAXID; id++) {
    int stored = shown(c, id);
    CHECKF(stored == live[id], "N=%llu kind %d: job %llu shown as %d before the restart, "
           "%d after (memory the database lacks)", (unsigned long long)nth, kind,
           (unsigned long long)id, live[id], stored);
    if (r.state[id] >= 0)
      CHECKF(stored >= 0, "N=%llu: acknowledged job %llu lost", (unsigned long long)nth,
             (unsigned long long)id);
  }
  rm_coord_close(c);
  snprintf(cmd, sizeof cmd, "rm -f %s %s-wal %s-shm %s.key", db, db, db, db);
  CHECKF(system(cmd) == 0, "rm");
  return 0;
}

int main(void)
{
  if (!RM_TESTHOOKS) {
    printf("SKIP: built without RINGMASTER_TEST_HOOKS\n");
    return 77;
  }
  char dir[] = "/tmp/rm-faults-XXXXXX", cmd[128];
  CHECKF(mkdtemp(dir) != NULL, "mkdtemp");
  int walked = 0;
  for (int kind = RM__STORE_FAIL_FULL; kind <= RM__STORE_FAIL_IOERR; kind++) {
    for (uint64_t nth = 1; nth < 400; nth++) {
      int faulted = 0;
      if (one_run(dir, nth, kind, &faulted)) break;
      walked++;
      if (!faulted) break; /* past the last write step of the script */
    }
  }
  printf("walked %d fault points\n", walked);
  CHECKF(walked > 20, "too few write steps walked (%d)", walked);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECKF(system(cmd) == 0, "rm -rf");
  return rm_check_exit("test_store_faults");
}
