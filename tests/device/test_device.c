/*
 * test_device - collectives on device buffers when things go wrong, and the
 * staging pipeline's own promises; real processes, the stand-in GPU (a test
 * double, worker/device/gpu_standin.c) or a real GPU (scripts/gpu-check).
 *
 *   staged   3 ranks, 1 MiB f32 ring all-reduce on device buffers: exact
 *            result; every message moved through staging (the staged byte
 *            counter equals what the ring sends and receives: 2 x 2(N-1)/N
 *            of the data, nothing bypassed it); the send buffer (out of
 *            place) came back untouched; host collectives on the same
 *            communicator still work before and after
 *   ipc      the same over shared memory with CUDA IPC on (the default
 *            between ranks of one host that both offer it): every message
 *            went by reference (the counter of by-reference bytes equals
 *            the ring's volume) and nothing was staged; "staged" runs with
 *            RINGMASTER_CUDA_IPC=0 or over TCP
 *   kinds    host send + device recv is RM_ERR_INVALID_ARG, and so is a
 *            host buffer under rm_comm_set_memory(RM_MEM_DEVICE); the
 *            communicator stays usable (a device all-reduce follows)
 *   illegal  rank 1's device send buffer is shorter than count says: its
 *            GPU faults on the device-to-host copy (the stand-in's illegal
 *            address); rank 1 fails RM_ERR_SYSTEM with "device:" in its
 *            words, the others fail too (its ABORT), none hangs
 *   stall    rank 2's GPU stops answering mid-collective (stand-in:
 *            RINGMASTER_TEST_GPU_STALL_AFTER); deadline 1500 ms: rank 2
 *            fails RM_ERR_TIMEOUT blaming its device ("device: ... the GPU
 *            makes no progress"), not a peer; the others end with an error
 *            within their deadlines
 *   kill     4 ranks loop 4 MiB device all-reduces; rank 2 is SIGKILLed:
 *            every survivor fails RM_ERR_PEER_LOST (or RM_ERR_TIMEOUT)
 *            naming rank 2, and destroys its communicator cleanly
 *   abort    2 ranks; rank 1 never joins the collective; a second thread of
 *            rank 0 calls rm_comm_abort: rank 0's device all-reduce returns
 *            RM_ERR_ABORTED
 *
 * Exit 77 when no GPU runtime is usable; "illegal" and "stall" need the
 * stand-in (they provoke a fault a real GPU is not asked to make).
 * No timing is asserted: the launcher's deadline only catches hangs.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rm_testdev.h"
#include "rm_testlib.h"

#include "core/comm_int.h"
#include "device/dev.h"

static rm_comm_t *open_rank(rm_test_world_t *w, int rank, int timeout_ms)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_test_config(w, rank, &cfg);
  if (timeout_ms > 0) cfg.timeout_ms = timeout_ms;
  w->res[rank].status = rm_comm_init(&cfg, &c);
  return w->res[rank].status == RM_OK ? c : NULL;
}

/* count floats of rank r's input: r + i % 97 (sums exact in f32). */
static float *input(int r, size_t count)
{
  float *h = malloc(count * sizeof *h);
  for (size_t i = 0; i < count; i++) h[i] = (float)(r + (int)(i % 97));
  return h;
}

static int check_sum(const float *got, size_t count, int n)
{
  for (size_t i = 0; i < count; i++) {
    float want = (float)(n * (int)(i % 97) + n * (n - 1) / 2);
    if (got[i] != want) {
      fprintf(stderr, "element %zu: got %g want %g\n", i, got[i], want);
      return 1;
    }
  }
  return 0;
}

static void *dev_input(int r, size_t count)
{
  float *h = input(r, count);
  void *d = rm_test_dev_alloc(count * sizeof(float));
  if (d == NULL || rm_test_dev_put(d, h, count * sizeof(float)) != 0) RM_TEST_FAIL("device buffer");
  free(h);
  return d;
}

/* ---- staged ---- */
/* arg NULL: every message staged; else every message by reference */
static int rank_staged(rm_test_world_t *w, int r, void *arg)
{
  size_t count = 1 << 18; /* 1 MiB of f32 */
  int n = w->world;
  float hx[4] = {1, 2, 3, 4};
  rm_comm_t *c = open_rank(w, r, 0);
  if (!c) RM_TEST_FAIL("rank %d: init %s", r, rm_status_name(w->res[r].status));
  if (rm_allreduce(c, hx, hx, 4, RM_F32, RM_SUM) != RM_OK) RM_TEST_FAIL("host allreduce before");
  void *ds = dev_input(r, count), *dr = rm_test_dev_alloc(count * sizeof(float));
  rm_status_t st = rm_allreduce_ex(c, ds, dr, count, RM_F32, RM_SUM, RM_ALGO_RING, NULL);
  if (st != RM_OK) RM_TEST_FAIL("rank %d: device allreduce %s: %s", r, rm_status_name(st), rm_comm_last_error(c));
  float *got = malloc(count * sizeof *got), *in = input(r, count);
  rm_test_dev_get(got, dr, count * sizeof(float));
  if (check_sum(got, count, n)) RM_TEST_FAIL("rank %d: wrong sum", r);
  rm_test_dev_get(got, ds, count * sizeof(float));
  if (memcmp(got, in, count * sizeof(float)) != 0) RM_TEST_FAIL("rank %d: send buffer modified", r);
  /* ring: 2(N-1) steps of count/N elements each way = 2 x 2(N-1)/N x bytes */
  uint64_t want = 2 * 2 * (uint64_t)(n - 1) * (count / (size_t)n) * sizeof(float);
  int ipc = arg != NULL;
  uint64_t got_b = c->dev ? (ipc ? c->dev->ref_bytes : c->dev->staged_bytes) : 0;
  uint64_t other = c->dev ? (ipc ? c->dev->staged_bytes : c->dev->ref_bytes) : 0;
  if (got_b < want - 64 * sizeof(float) || got_b > want + 64 * sizeof(float) || other != 0)
    RM_TEST_FAIL("rank %d: %s %llu bytes (the other way %llu), the ring moves %llu", r,
                 ipc ? "by reference" : "staged", (unsigned long long)got_b,
                 (unsigned long long)other, (unsigned long long)want);
  if (c->dev->head != NULL || c->dev_active) RM_TEST_FAIL("rank %d: staging left records", r);
  if (rm_allreduce(c, hx, hx, 4, RM_F32, RM_SUM) != RM_OK) RM_TEST_FAIL("host allreduce after");
  if (hx[3] != 4.0f * (float)n * (float)n) RM_TEST_FAIL("rank %d: host result %g", r, hx[3]);
  rm_test_dev_free(ds);
  rm_test_dev_free(dr);
  free(got);
  free(in);
  rm_comm_destroy(c);
  return 0;
}

/* ---- kinds ---- */
static int rank_kinds(rm_test_world_t *w, int r, void *arg)
{
  size_t count = 1000;
  rm_comm_t *c = open_rank(w, r, 0);
  float *h = input(r, count);
  void *d = dev_input(r, count);
  (void)arg;
  if (!c) RM_TEST_FAIL("init");
  if (rm_allreduce(c, h, d, count, RM_F32, RM_SUM) != RM_ERR_INVALID_ARG)
    RM_TEST_FAIL("host send + device recv accepted");
  if (rm_broadcast(c, d, count, RM_F32, 5) != RM_ERR_INVALID_ARG) RM_TEST_FAIL("bad root");
  rm_comm_set_memory(c, RM_MEM_DEVICE);
  if (rm_allreduce(c, h, h, count, RM_F32, RM_SUM) != RM_ERR_INVALID_ARG)
    RM_TEST_FAIL("host buffer under RM_MEM_DEVICE accepted");
  if (rm_comm_status(c) != RM_OK) RM_TEST_FAIL("argument errors failed the communicator");
  rm_status_t st = rm_allreduce(c, d, d, count, RM_F32, RM_SUM);
  if (st != RM_OK) RM_TEST_FAIL("device allreduce after refusals: %s", rm_comm_last_error(c));
  rm_test_dev_get(h, d, count * sizeof(float));
  if (check_sum(h, count, w->world)) RM_TEST_FAIL("wrong sum");
  rm_comm_set_memory(c, RM_MEM_AUTO);
  free(h);
  rm_test_dev_free(d);
  rm_comm_destroy(c);
  return 0;
}

/* ---- illegal, stall, kill: the ranks record how they ended ---- */
typedef struct fault {
  const char *mode;
  int victim;
} fault_t;

static int rank_fault(rm_test_world_t *w, int r, void *arg)
{
  const fault_t *f = arg;
  size_t count = (size_t)1 << 20; /* 4 MiB of f32 */
  int stall = strcmp(f->mode, "stall") == 0, kill_mode = strcmp(f->mode, "kill") == 0;
  if (stall && r == f->victim) setenv("RINGMASTER_TEST_GPU_STALL_AFTER", "40", 1);
  rm_comm_t *c = open_rank(w, r, stall ? 1500 : 5000);
  if (!c) return 1;
  void *d = dev_input(r, count);
  /* illegal: rank `victim` says count but owns a quarter of it */
  void *small = NULL;
  if (strcmp(f->mode, "illegal") == 0 && r == f->victim) {
    small = rm_test_dev_alloc(count);
    rm_test_dev_free(d);
    d = small;
  }
  rm_status_t st = RM_OK;
  for (int i = 0; i < 50 && st == RM_OK; i++) {
    if (kill_mode && r == f->victim && i == 3) kill(getpid(), SIGKILL);
    st = rm_allreduce_ex(c, d, d, count, RM_F32, RM_SUM, RM_ALGO_RING, NULL);
    w->res[r].value = i + 1;
  }
  rm_test_dev_free(d);
  rm_test_finish(&w->res[r], c, st);
  return 0;
}

static int check_fault(rm_test_world_t *w, const fault_t *f)
{
  int bad = 0;
  for (int r = 0; r < w->world; r++) {
    const rm_test_result_t *res = &w->res[r];
    if (strcmp(f->mode, "kill") == 0 && r == f->victim) continue;
    printf("rank %d: %s after %g collectives: %s\n", r, rm_status_name(res->status), res->value,
           res->msg);
    if (res->status == RM_OK) {
      fprintf(stderr, "rank %d ended RM_OK\n", r);
      bad++;
      continue;
    }
    if (r == f->victim && strcmp(f->mode, "illegal") == 0 &&
        (res->status != RM_ERR_SYSTEM || strstr(res->msg, "device:") == NULL)) {
      fprintf(stderr, "rank %d: want RM_ERR_SYSTEM naming the device\n", r);
      bad++;
    }
    if (r == f->victim && strcmp(f->mode, "stall") == 0 &&
        (res->status != RM_ERR_TIMEOUT || strstr(res->msg, "the GPU makes no progress") == NULL ||
         res->failed_peer != -1)) {
      fprintf(stderr, "rank %d: want RM_ERR_TIMEOUT blaming its GPU, not a peer\n", r);
      bad++;
    }
    if (strcmp(f->mode, "kill") == 0 &&
        ((res->status != RM_ERR_PEER_LOST && res->status != RM_ERR_TIMEOUT) ||
         res->failed_peer != f->victim)) {
      fprintf(stderr, "rank %d: want RM_ERR_PEER_LOST naming rank %d\n", r, f->victim);
      bad++;
    }
  }
  return bad;
}

/* ---- abort ---- */
static void *aborter(void *arg)
{
  usleep(300 * 1000);
  rm_comm_abort(arg);
  return NULL;
}

static int rank_abort(rm_test_world_t *w, int r, void *arg)
{
  rm_comm_t *c = open_rank(w, r, 20000);
  (void)arg;
  if (!c) return 1;
  if (r == 1) { /* never joins the collective; leaves once rank 0 is done */
    while (!w->res[0].done) usleep(10000);
    rm_comm_destroy(c);
    return 0;
  }
  void *d = dev_input(r, 1 << 16);
  pthread_t th;
  pthread_create(&th, NULL, aborter, c);
  rm_status_t st = rm_allreduce(c, d, d, 1 << 16, RM_F32, RM_SUM);
  pthread_join(th, NULL);
  if (st != RM_ERR_ABORTED) RM_TEST_FAIL("device allreduce after abort: %s", rm_status_name(st));
  if (rm_allreduce(c, d, d, 1 << 16, RM_F32, RM_SUM) != RM_ERR_ABORTED) RM_TEST_FAIL("not sticky");
  rm_test_dev_free(d);
  rm_comm_destroy(c);
  return 0;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  char why[256];
  rm_test_world_t w;
  fault_t f = {mode, 1};
  int world = 3, bad;
  rm_test_rank_fn fn = NULL;
  if (!rm_test_gpu_available(why, sizeof why)) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  if ((!strcmp(mode, "illegal") || !strcmp(mode, "stall")) && strcmp(why, "standin") != 0) {
    printf("SKIP: %s provokes a GPU fault: stand-in GPU only (runtime here: %s)\n", mode, why);
    return 77;
  }
  if (!strcmp(mode, "staged")) fn = rank_staged;
  else if (!strcmp(mode, "ipc")) fn = rank_staged;
  else if (!strcmp(mode, "kinds")) fn = rank_kinds;
  else if (!strcmp(mode, "abort")) { fn = rank_abort; world = 2; }
  else if (!strcmp(mode, "illegal")) fn = rank_fault;
  else if (!strcmp(mode, "stall")) { fn = rank_fault; f.victim = 2; }
  else if (!strcmp(mode, "kill")) { fn = rank_fault; f.victim = 2; world = 4; }
  if (fn == NULL) {
    fprintf(stderr, "usage: test_device staged|ipc|kinds|illegal|stall|kill|abort\n");
    return 2;
  }
  if (rm_test_world_open(&w, world) != 0) return 1;
  if (rm_test_start(&w, fn, !strcmp(mode, "staged") ? NULL : (void *)&f) != 0) return 1;
  bad = rm_test_wait(&w, 90000, !strcmp(mode, "kill") ? f.victim : -1);
  if (fn == rank_fault) bad += check_fault(&w, &f);
  bad += rm_test_shm_leftovers(&w);
  rm_test_world_close(&w);
  printf("device %s: %s\n", mode, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
