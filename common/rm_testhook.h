/*
 * rm_testhook.h - the test hooks, the one way production code reaches them
 * (SQLite's SQLITE_TEST habit).
 *
 * Compiled in only when the target is built with RINGMASTER_TEST_HOOKS
 * (CMake option RINGMASTER_TEST_HOOKS=ON, which scripts/test passes; see
 * rm_test_hooks() in common/CMakeLists.txt). Otherwise every hook below is
 * an inline no-op: an installed build contains neither the getenv of
 * RINGMASTER_TEST_CRASH_AT nor the checkpoint hook pointer.
 *
 *   RM_TESTHOOKS                1 when compiled in, else 0 (a test that
 *                               needs the hooks skips with exit 77 on 0)
 *   rm__crash_point(where, step), rm__crash_wants(where, step)
 *                               the training step's kill points
 *                               (worker/train/crash_hook.c)
 *   rm__testhook_ckpt(stage)    the checkpoint writer's fault point
 *                               (worker/checkpoint/checkpoint.c: "synced",
 *                               after fsync and before rename) calls the
 *                               function set with rm__testhook_set_ckpt
 *   rm__testhook_secagg_die(rank, round, seq)
 *                               the start of a secure-aggregation round
 *   rm__testhook_secagg_tamper(rank)
 *                               1: corrupt a received public key
 *   rm__testhook_tap(buf, len)  every payload the TCP transport receives
 *                               these three are points the library calls
 *                               and nothing more: what happens there is a
 *                               test's (tests/doubles/secagg_hook.c kills a
 *                               rank or tampers, tests/doubles/tcp_tap.c
 *                               records the payloads), in a shared object
 *                               the process names with
 *                               RINGMASTER_TEST_HOOKS_LIB=PATH; the library
 *                               loads it at the first point reached and
 *                               calls its rm_test_hook_ops()
 *                               (RM__TESTHOOK_ENTRY, rm_testhook.c)
 *   rm__testhook_store_step()   RINGMASTER_TEST_STORE_FAIL=N:KIND[:K]
 *                               the coordinator store's Nth write step
 *                               (BEGIN, INSERT, UPDATE, COMMIT; counted
 *                               from 1 in the process) and the K-1 after it
 *                               (K 0: all after it) fail. KIND full, ioerr
 *                               or readonly: with SQLITE_FULL / SQLITE_IOERR
 *                               / SQLITE_READONLY instead of running; eio,
 *                               erofs or enospc: the step runs, and every
 *                               write(2)/pwrite(2) SQLite makes during it
 *                               fails with that errno (store.c OS FAULTS),
 *                               so SQLite's own mapping answers; a test in
 *                               the process arms it with
 *                               rm__testhook_store_fail (n 0: disarm) and
 *                               reads the count with rm__testhook_store_steps
 *                               (coordinator/store/store_hook.c)
 */
#ifndef RM_COMMON_TESTHOOK_H
#define RM_COMMON_TESTHOOK_H

#include <stddef.h>
#include <stdint.h>

typedef void (*rm__testhook_fn)(const char *stage);

/* What rm__testhook_store_step asks the store to fail a step with. */
enum {
  RM__STORE_FAIL_NONE = 0,
  RM__STORE_FAIL_FULL = 1,
  RM__STORE_FAIL_IOERR = 2,
  RM__STORE_FAIL_READONLY = 3,
  RM__STORE_FAIL_EIO = 4,    /* at the system call: EIO */
  RM__STORE_FAIL_EROFS = 5,  /* ... EROFS (a file system remounted read-only) */
  RM__STORE_FAIL_ENOSPC = 6  /* ... ENOSPC */
};

/* A test's points of the worker library (top of file); a NULL member is
 * a point the test leaves alone. round: "keys", "confirm", "mask",
 * "reduce", "open", "unmask" (seq is not counted for keys and confirm). */
typedef struct rm__testhook_ops {
  void (*secagg_die)(int rank, const char *round, uint64_t seq);
  int (*secagg_tamper)(int rank);
  void (*tap)(const void *buf, size_t len);
} rm__testhook_ops_t;
/* What the shared object exports: given sizeof(rm__testhook_ops_t), its
 * table, or NULL to refuse. */
#define RM__TESTHOOK_ENTRY "rm_test_hook_ops"
typedef const rm__testhook_ops_t *(*rm__testhook_entry_t)(size_t table_size);
#ifdef RINGMASTER_TEST_HOOKS
#define RM_TESTHOOKS 1

/* SIGKILL this process if RINGMASTER_TEST_CRASH_AT names (where, step);
 * "checkpoint" arms the checkpoint writer's hook for the write that
 * follows. rm__crash_wants: whether it would. */
void rm__crash_point(const char *where, uint64_t step);
int rm__crash_wants(const char *where, uint64_t step);

/* The checkpoint writer's hook (NULL: none); set it in a forked child to
 * _exit() at a stage. Not thread-safe: set it before any writer runs. */
extern rm__testhook_fn rm__ckpt_test_hook;
static inline void rm__testhook_set_ckpt(rm__testhook_fn fn) { rm__ckpt_test_hook = fn; }
static inline void rm__testhook_ckpt(const char *stage)
{
  if (rm__ckpt_test_hook != NULL) rm__ckpt_test_hook(stage);
}

/* The table of RINGMASTER_TEST_HOOKS_LIB, loaded once per process, or
 * NULL (none named, or it did not load: one error line). */
const rm__testhook_ops_t *rm__testhook_ops(void);

static inline void rm__testhook_secagg_die(int rank, const char *round, uint64_t seq)
{
  const rm__testhook_ops_t *o = rm__testhook_ops();
  if (o != NULL && o->secagg_die != NULL) o->secagg_die(rank, round, seq);
}
static inline int rm__testhook_secagg_tamper(int rank)
{
  const rm__testhook_ops_t *o = rm__testhook_ops();
  return o != NULL && o->secagg_tamper != NULL && o->secagg_tamper(rank);
}
static inline void rm__testhook_tap(const void *buf, size_t len)
{
  const rm__testhook_ops_t *o = rm__testhook_ops();
  if (o != NULL && o->tap != NULL) o->tap(buf, len);
}
int rm__testhook_store_step(void);
void rm__testhook_store_fail(uint64_t nth, int kind, uint64_t count);
uint64_t rm__testhook_store_steps(void);

#else
#define RM_TESTHOOKS 0

static inline void rm__crash_point(const char *where, uint64_t step)
{
  (void)where;
  (void)step;
}
static inline int rm__crash_wants(const char *where, uint64_t step)
{
  (void)where;
  (void)step;
  return 0;
}
static inline void rm__testhook_set_ckpt(rm__testhook_fn fn) { (void)fn; }
static inline void rm__testhook_ckpt(const char *stage) { (void)stage; }
static inline void rm__testhook_secagg_die(int rank, const char *round, uint64_t seq)
{
  (void)rank;
  (void)round;
  (void)seq;
}
static inline int rm__testhook_secagg_tamper(int rank)
{
  (void)rank;
  return 0;
}
static inline void rm__testhook_tap(const void *buf, size_t len)
{
  (void)buf;
  (void)len;
}
static inline int rm__testhook_store_step(void) { return RM__STORE_FAIL_NONE; }
#endif

#endif
