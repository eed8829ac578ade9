/*
 * gpu.c - which GPU runtime this process uses (gpu.h), decided once.
 *
 * Order: a test's GPU when the process names one (test-hook builds,
 * RINGMASTER_TEST_GPU=PATH of a shared object, gpu.h), else the CUDA
 * runtime when it is built in
 * and sees at least one device, else none. RINGMASTER_GPU=off turns device
 * support off (every pointer is host memory; a device pointer handed to a
 * collective then faults like any bad pointer, so use it only on a machine
 * without device buffers).
 *
 * The decision is lazy: nothing here runs until a collective (or a test)
 * first asks whether a pointer is device memory. CUDA does not survive
 * fork(), and probing initialises the driver, so a parent that forks ranks
 * must not ask before it forks (tests/lib forks first).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "device/gpu.h"
#include "rm_config.h"
#include "rm_log.h"
#include "rm_param.h"

static const rm__gpu_ops_t *g_ops;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if !RM_HAVE_CUDA
const rm__gpu_ops_t *rm__gpu_cuda_probe(void) { return NULL; }
#endif

#ifdef RINGMASTER_TEST_HOOKS
/* The GPU table of the shared object RINGMASTER_TEST_GPU names (gpu.h), or
 * NULL when none is named. A named one that does not load is an error the
 * test must see, not a silent fall-back to the host path. */
static const char *test_gpu_path(void)
{
  const char *p = rm__env_str("RINGMASTER_TEST_GPU", NULL);
  return p != NULL && p[0] != '\0' ? p : NULL;
}

static const rm__gpu_ops_t *test_gpu(void)
{
  const char *path = test_gpu_path();
  const rm__gpu_ops_t *g = NULL;
  rm__gpu_test_entry_t entry;
  void *h;
  if (path == NULL) return NULL;
  h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    RM_ERROR("gpu: RINGMASTER_TEST_GPU: dlopen %s: %s", path, e ? e : "failed");
    return NULL;
  }
  *(void **)&entry = dlsym(h, RM__GPU_TEST_ENTRY);
  if (entry != NULL) g = entry(sizeof(rm__gpu_ops_t));
  if (g == NULL) {
    RM_ERROR("gpu: RINGMASTER_TEST_GPU: %s has no %s() or refused this library's table", path,
             RM__GPU_TEST_ENTRY);
    dlclose(h);
  }
  return g; /* h stays open for the life of the process, as the table does */
}
#else
static const char *test_gpu_path(void) { return NULL; }
static const rm__gpu_ops_t *test_gpu(void) { return NULL; }
#endif

static void choose(void)
{
  const char *want = rm__env_str("RINGMASTER_GPU", "auto");
  const rm__gpu_ops_t *g = NULL;
  if (strcmp(want, "off") == 0) {
    RM_INFO("gpu: RINGMASTER_GPU=off: device buffers are not recognised");
    return;
  }
  g = test_gpu();
  if (g == NULL && test_gpu_path() == NULL) g = rm__gpu_cuda_probe();
  if (g != NULL) RM_DEBUG("gpu: device memory through the %s runtime", g->name);
  g_ops = g;
}

const rm__gpu_ops_t *rm__gpu(void)
{
  pthread_once(&g_once, choose);
  return g_ops;
}

static int g_gdr;
static pthread_once_t g_gdr_once = PTHREAD_ONCE_INIT;

static void choose_gdr(void)
{
  const rm__gpu_ops_t *g = rm__gpu();
  const char *why;
  if (g == NULL) return;
  if (rm__env_int("RINGMASTER_GDR", 1) == 0) {
    why = "off (RINGMASTER_GDR=0)";
  } else if (g->gdr != NULL) {
    g_gdr = g->gdr();
    why = g_gdr ? "on (the runtime says its memory is reachable by the NIC)"
                : "off (the runtime says its memory is not reachable by the NIC)";
  } else if (access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
             access("/sys/module/nvidia_peermem", F_OK) == 0) {
    g_gdr = 1;
    why = "on (nvidia-peermem is loaded)";
  } else {
    why = "off (nvidia-peermem is not loaded)";
  }
  RM_INFO("gpu: GPUDirect RDMA %s: device memory over RDMA is %s", why,
          g_gdr ? "registered with the NIC directly" : "staged through host memory");
}

int rm__gpu_gdr(void)
{
  pthread_once(&g_gdr_once, choose_gdr);
  return g_gdr;
}

#ifdef RINGMASTER_TEST_HOOKS
/* Test machinery (test-hook builds only; not in any header): device
 * memory for tests that reach the library only through its exported
 * symbols (the Python tests), through the runtime in use (a test's GPU,
 * or CUDA on a GPU machine). Copies are synchronous. */
RM_EXTERN void *rm_testhook_gpu_alloc(size_t n);
RM_EXTERN void rm_testhook_gpu_free(void *p);
RM_EXTERN int rm_testhook_gpu_copy(void *dst, const void *src, size_t n);

void *rm_testhook_gpu_alloc(size_t n)
{
  const rm__gpu_ops_t *g = rm__gpu();
  void *p = NULL;
  int prev;
  if (g == NULL || g->set_device(0, &prev) != RM_OK || g->dev_alloc(n, &p) != RM_OK) return NULL;
  return p;
}

void rm_testhook_gpu_free(void *p)
{
  const rm__gpu_ops_t *g = rm__gpu();
  if (g != NULL) g->dev_free(p);
}

int rm_testhook_gpu_copy(void *dst, const void *src, size_t n)
{
  const rm__gpu_ops_t *g = rm__gpu();
  void *ev = NULL;
  int q = -1;
  if (g == NULL) return -1;
  if (g->copy(dst, src, n, NULL) == RM_OK && g->event_create(&ev) == RM_OK &&
      g->event_record(ev, NULL) == RM_OK)
    while ((q = g->event_query(ev)) == 0) sched_yield();
  if (ev) g->event_destroy(ev);
  return q == 1 ? 0 : -1;
}
#endif

int rm__gpu_ipc_offerable(void)
{
  if (rm__env_int("RINGMASTER_CUDA_IPC", 1) == 0) return 0;
  if (strcmp(rm__env_str("RINGMASTER_GPU", "auto"), "off") == 0) return 0;
  if (test_gpu_path() != NULL) return 1;
  return RM_HAVE_CUDA && access("/dev/nvidiactl", F_OK) == 0;
}
