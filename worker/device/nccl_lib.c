/*
 * nccl_lib.c - NCCL's entry points by dlopen (nccl.h): the library builds
 * without NCCL and a process that never asks for NCCL never loads it.
 *
 * Which library: RINGMASTER_NCCL_LIB (a path or a soname), else
 * libnccl.so.2, else libnccl.so, through the dynamic loader's search (the
 * CUDA toolkit's lib64 must be in the loader's path, as for any CUDA
 * program). Every entry point the backend calls must resolve; a library
 * older than 2.14 (no ncclCommInitRankConfig, the non-blocking init the
 * deadline needs) is refused with its version in the reason.
 *
 * The decision is made once per process (thread-safe).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "device/nccl.h"
#include "rm_log.h"
#include "rm_param.h"

static rm__nccl_lib_t g_lib;
static const rm__nccl_lib_t *g_use;
static char g_why[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#define SYM(field, name)                                                      \
  do {                                                                        \
    *(void **)&g_lib.field = dlsym(h, name);                                  \
    if (g_lib.field == NULL) {                                                \
      snprintf(g_why, sizeof g_why, "%s has no %s (NCCL 2.14 or newer is needed)", path, name); \
      return 0;                                                               \
    }                                                                         \
  } while (0)

static int resolve(void *h, const char *path)
{
  SYM(GetVersion, "ncclGetVersion");
  SYM(GetUniqueId, "ncclGetUniqueId");
  SYM(CommInitRankConfig, "ncclCommInitRankConfig");
  SYM(CommGetAsyncError, "ncclCommGetAsyncError");
  SYM(CommAbort, "ncclCommAbort");
  SYM(CommDestroy, "ncclCommDestroy");
  SYM(GetErrorString, "ncclGetErrorString");
  SYM(AllReduce, "ncclAllReduce");
  SYM(Broadcast, "ncclBroadcast");
  SYM(Reduce, "ncclReduce");
  SYM(AllGather, "ncclAllGather");
  SYM(ReduceScatter, "ncclReduceScatter");
  SYM(Send, "ncclSend");
  SYM(Recv, "ncclRecv");
  SYM(GroupStart, "ncclGroupStart");
  SYM(GroupEnd, "ncclGroupEnd");
  return 1;
}

static void load(void)
{
  static char path_kept[200];
  const char *want = rm__env_str("RINGMASTER_NCCL_LIB", NULL);
  const char *tries[] = {want, "libnccl.so.2", "libnccl.so"};
  for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
    if (tries[i] == NULL || (want != NULL && i > 0)) continue;
    void *h = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      const char *e = dlerror();
      snprintf(g_why, sizeof g_why, "dlopen %s: %s", tries[i], e ? e : "failed");
      continue;
    }
    snprintf(path_kept, sizeof path_kept, "%s", tries[i]);
    if (!resolve(h, path_kept)) {
      dlclose(h);
      return;
    }
    int v = 0;
    g_lib.GetVersion(&v);
    g_lib.name = path_kept;
    g_use = &g_lib;
    RM_INFO("nccl: %s loaded (version code %d)", path_kept, v);
    return;
  }
}

const rm__nccl_lib_t *rm__nccl_lib(char *why, size_t n)
{
  pthread_once(&g_once, load);
  if (g_use == NULL && why != NULL && n > 0) snprintf(why, n, "%s", g_why);
  return g_use;
}
