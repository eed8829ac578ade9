/*
 * store_hook.c - the store's fault point for tests (test builds only,
 * common/rm_testhook.h): fail the Nth write step of the process with
 * SQLITE_FULL, SQLITE_IOERR or SQLITE_READONLY, or make the system calls
 * that write fail under it (EIO, EROFS, ENOSPC: store.c OS FAULTS), as
 * SQLite's own test suite does at every write, so a test can walk the
 * failure over every write a job's life makes. Armed from
 * RINGMASTER_TEST_STORE_FAIL=N:KIND[:K] (rm_testhook.h) at the
 * first step, or by rm__testhook_store_fail in the test's own process.
 * The steps run under the coordinator lock; the counters are atomics so
 * a test thread may arm and read them between sections.
 */
#include <stdlib.h>
#include <string.h>

#include "rm_testhook.h"

#ifdef RINGMASTER_TEST_HOOKS
static uint64_t steps, fail_at, fail_count;
static int fail_kind, env_read;

static void from_env(void)
{
  const char *e = getenv("RINGMASTER_TEST_STORE_FAIL");
  char *end = NULL;
  if (!e || !*e) return;
  uint64_t n = strtoull(e, &end, 10);
  int kind = RM__STORE_FAIL_FULL;
  uint64_t k = 1;
  if (end && *end == ':') {
    static const struct { const char *name; int kind; } kinds[] = {
        {"full", RM__STORE_FAIL_FULL},     {"ioerr", RM__STORE_FAIL_IOERR},
        {"readonly", RM__STORE_FAIL_READONLY}, {"eio", RM__STORE_FAIL_EIO},
        {"erofs", RM__STORE_FAIL_EROFS},   {"enospc", RM__STORE_FAIL_ENOSPC}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
      size_t len = strlen(kinds[i].name);
      if (!strncmp(end + 1, kinds[i].name, len) && (end[1 + len] == ':' || !end[1 + len]))
        kind = kinds[i].kind;
    }
    end = strchr(end + 1, ':');
    if (end) k = strtoull(end + 1, NULL, 10);
  }
  rm__testhook_store_fail(n, kind, k);
}

void rm__testhook_store_fail(uint64_t nth, int kind, uint64_t count)
{
  __atomic_store_n(&steps, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&fail_kind, kind, __ATOMIC_SEQ_CST);
  __atomic_store_n(&fail_count, count, __ATOMIC_SEQ_CST);
  __atomic_store_n(&fail_at, nth, __ATOMIC_SEQ_CST);
  __atomic_store_n(&env_read, 1, __ATOMIC_SEQ_CST);
}

uint64_t rm__testhook_store_steps(void) { return __atomic_load_n(&steps, __ATOMIC_SEQ_CST); }

int rm__testhook_store_step(void)
{
  if (!__atomic_exchange_n(&env_read, 1, __ATOMIC_SEQ_CST)) from_env();
  uint64_t n = __atomic_add_fetch(&steps, 1, __ATOMIC_SEQ_CST);
  uint64_t at = __atomic_load_n(&fail_at, __ATOMIC_SEQ_CST);
  uint64_t k = __atomic_load_n(&fail_count, __ATOMIC_SEQ_CST);
  if (at == 0 || n < at || (k != 0 && n >= at + k)) return RM__STORE_FAIL_NONE;
  return __atomic_load_n(&fail_kind, __ATOMIC_SEQ_CST);
}
#else
typedef int rm__store_hook_none; /* ISO C: no empty translation unit */
#endif
