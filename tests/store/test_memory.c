/*
 * test_memory.c - a coordinator's memory is bounded by its work in flight,
 * not its history (coordinator/core/job.c retention): RSS after 10,000
 * finished jobs (submitted and cancelled, launcher none) is within a fixed
 * bound (BOUND_KB) of RSS after 100, on a real coordinator and SQLite file,
 * with the default retention. Every finished job still reads back (from
 * the store once unloaded). The old code kept every finished job loaded
 * for 10 minutes: about 11 KB a job, 100+ MB here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord.h"
#include "rm_testcheck.h"

#include "../api/coord_fixture.h"

#define BOUND_KB (32 * 1024)

static long rss_kb(void)
{
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void finish_jobs(rm_coord_t *c, int from, int n, uint64_t *first, uint64_t *last)
{
  for (int i = from; i < from + n; i++) {
    uint64_t id = submit_named(c, "mem", i);
    CHECKF(rm_coord_job_cancel(c, id, NULL) == RM_OK, "cancel %llu", (unsigned long long)id);
    if (i == from) *first = id;
    *last = id;
  }
}

#if defined(__SANITIZE_ADDRESS__)
#define RM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RM_ASAN 1
#endif
#endif

int main(void)
{
#ifdef RM_ASAN
  /* AddressSanitizer's quarantine holds freed memory back on purpose: RSS
   * says nothing about what the coordinator keeps there */
  printf("SKIP: RSS is not measured under AddressSanitizer\n");
  return 77;
#endif
  char dir[] = "/tmp/rm-mem-XXXXXX", db[64], cmd[128];
  uint64_t first = 0, last = 0, f2 = 0;
  rm_job_info_t info;
  CHECKF(mkdtemp(dir) != NULL, "mkdtemp");
  snprintf(db, sizeof db, "%s/rm.db", dir);
  rm_coord_t *c = open_coord(db);
  if (!c) return 1;
  finish_jobs(c, 0, 100, &first, &last);
  long at100 = rss_kb();
  finish_jobs(c, 100, 10000, &f2, &last);
  long at10k = rss_kb();
  printf("RSS after 100 finished jobs: %ld KB; after 10,100: %ld KB (+%ld KB, bound %d KB)\n",
         at100, at10k, at10k - at100, BOUND_KB);
  CHECKF(at100 > 0 && at10k > 0, "no RSS from /proc/self/statm");
  CHECKF(at10k - at100 <= BOUND_KB, "RSS grew %ld KB over 10,000 finished jobs (bound %d KB)",
         at10k - at100, BOUND_KB);
  CHECKF(rm_coord_job_get(c, first, &info) == RM_OK && info.state == RM_JOB_CANCELLED,
         "the first finished job reads back");
  CHECKF(rm_coord_job_get(c, last, &info) == RM_OK && info.state == RM_JOB_CANCELLED,
         "the last finished job reads back");
  rm_coord_close(c);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECKF(system(cmd) == 0, "rm -rf");
  return rm_check_exit("test_store_memory");
}
