/*
 * gpu.c - which GPU runtime this process uses (gpu.h), decided once.
 *
 * Order: the test double when the process asks for it (test-hook builds,
 * RINGMASTER_TEST_GPU=standin), else the CUDA runtime when it is built in
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

static void choose(void)
{
  const char *want = rm__env_str("RINGMASTER_GPU", "auto");
  const rm__gpu_ops_t *g = NULL;
  if (strcmp(want, "off") == 0) {
    RM_INFO("gpu: RINGMASTER_GPU=off: device buffers are not recognised");
    return;
  }
  g = rm__gpu_standin();
  if (g == NULL) g = rm__gpu_cuda_probe();
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
  } else if (strcmp(g->name, "standin") == 0) {
    g_gdr = rm__gpu_standin_gdr();
    why = g_gdr ? "on (the stand-in GPU acts as GPUDirect-capable)" : "off (stand-in GPU)";
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
 * symbols (the Python tests), through the runtime in use (the stand-in GPU,
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
  if (rm__gpu_standin_wanted()) return 1;
  return RM_HAVE_CUDA && access("/dev/nvidiactl", F_OK) == 0;
}
