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
 */
#ifndef RM_COMMON_TESTHOOK_H
#define RM_COMMON_TESTHOOK_H

#include <stdint.h>

typedef void (*rm__testhook_fn)(const char *stage);

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
#endif

#endif
