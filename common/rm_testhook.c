/*
 * rm_testhook.c - the worker library's test-hook seam (rm_testhook.h):
 * test-hook builds only. RINGMASTER_TEST_HOOKS_LIB names a shared object
 * of the tests (tests/doubles/); at the first hook point the process
 * reaches, it is loaded and its RM__TESTHOOK_ENTRY function gives the table
 * the points call. The library contains no test behaviour of its own here,
 * and builds without test hooks have neither this file's code nor the
 * points (rm_testhook.h's inline no-ops).
 *
 * Loaded once per process: a child forked after the load keeps the parent's
 * table (the object's own state handles the fork, as its tap does).
 */
#ifdef RINGMASTER_TEST_HOOKS
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "rm_log.h"
#include "rm_testhook.h"

static const rm__testhook_ops_t *g_ops;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void)
{
  const char *path = getenv("RINGMASTER_TEST_HOOKS_LIB");
  rm__testhook_entry_t entry;
  void *h;
  if (path == NULL || path[0] == '\0') return;
  h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    RM_ERROR("test hooks: RINGMASTER_TEST_HOOKS_LIB: dlopen %s: %s", path, e ? e : "failed");
    return;
  }
  *(void **)&entry = dlsym(h, RM__TESTHOOK_ENTRY);
  if (entry != NULL) g_ops = entry(sizeof(rm__testhook_ops_t));
  if (g_ops == NULL) {
    RM_ERROR("test hooks: RINGMASTER_TEST_HOOKS_LIB: %s has no %s() or refused this library's table",
             path, RM__TESTHOOK_ENTRY);
    dlclose(h);
  }
}

const rm__testhook_ops_t *rm__testhook_ops(void)
{
  pthread_once(&g_once, load);
  return g_ops;
}
#else
/* ISO C wants a translation unit to declare something. */
typedef int rm__testhook_seam_unused;
#endif
