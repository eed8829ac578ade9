/*
 * test_device - collectives on device buffers when things go wrong, and the
 * staging pipeline's own promises; real processes, the stand-in GPU (a test
 * double, tests/doubles/gpu_standin.c) or a real GPU (scripts/gpu-check).
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
 *   gdr      the same over RDMA (the verbs test double) with GPUDirect RDMA
 *            (the stand-in's RINGMASTER_TEST_GPU_GDR=1): every message went
 *            directly between device memory and the NIC, nothing staged
 *   kinds    host send + device recv is RM_ERR_INVALID_ARG, and so is a
 *            host buffer under rm_comm_set_memory(RM_MEM_DEVICE);
 *            rm_aggregate refuses device memory (RM_ERR_UNSUPPORTED: it
 *            computes on the CPU) without touching it; the communicator
 *            stays usable (a device all-reduce follows)
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
 *   nccl     3 ranks (RINGMASTER_NCCL_LIB naming tests/doubles: the stand-in NCCL; on a
 *            GPU machine the real libnccl), the communicator's algorithm
 *            nccl: all-reduce (sum f32, avg f64, max i32), broadcast,
 *            reduce, all-gather, reduce-scatter and all-to-all on device
 *            buffers are exact and ran on NCCL (info.algorithm); a host
 *            all-reduce on the same communicator runs ringmaster's
 *   nccl_off rank 1 cannot load NCCL (RINGMASTER_NCCL_LIB names no file):
 *            every rank agrees to run without it (one warning names rank
 *            1); the same collectives are exact on ringmaster's algorithms
 *   nccl_kill 3 ranks loop NCCL all-reduces, rank 2 is SIGKILLed: the
 *            survivors' waits end within their deadline (1500 ms) with an
 *            "nccl:" failure (NCCL cannot name the peer; the session's
 *            heartbeats do), NCCL is aborted, nothing hangs
 *   nccl_abort 2 ranks; after a first NCCL all-reduce rank 1 stops; rank
 *            0's second one is ended by rm_comm_abort from another thread
 *            (RM_ERR_ABORTED)
 *   masked   the masked average of a gated straggler step
 *            (rm__masked_allreduce) on device buffers, 6 rounds of changing
 *            members, in place and out of place: exact; a non-member's
 *            receive buffer held junk (it is zeroed on the GPU), its send
 *            buffer is NULL; the contributor count is the members'
 *   nccl_relay only rank 1 was handed an NCCL id (as the coordinator relay
 *            does, rm__nccl_set_id): every rank agrees to make a new one on
 *            the data plane instead of running mismatched collectives; the
 *            all-reduce is exact, ran on NCCL (info.algorithm) and selected
 *            no ringmaster algorithm (predicted_us 0)
 *   abort    2 ranks; rank 1 never joins the collective; a second thread of
 *            rank 0 calls rm_comm_abort: rank 0's device all-reduce returns
 *            RM_ERR_ABORTED
 *
 * TEST_DEVICE_WORLD=N sets the world of every mode (scripts/gpu-check runs
 * the NCCL modes at 1 and 2 on its one GPU).
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

#include "aggregate/aggregate.h"
#include "comm/comm_int.h"
#include "device/dev.h"
#include "device/nccl.h"

typedef struct fault {
  const char *mode;
  int victim;
} fault_t;

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
  /* arg: which counter must hold every byte ("staged", "ipc", "gdr") */
  const char *way = arg ? ((const fault_t *)arg)->mode : "staged";
  uint64_t counts[3] = {c->dev->staged_bytes, c->dev->ref_bytes, c->dev->direct_bytes};
  int k = !strcmp(way, "ipc") ? 1 : !strcmp(way, "gdr") ? 2 : 0;
  uint64_t got_b = counts[k], other = counts[0] + counts[1] + counts[2] - counts[k];
  if (got_b < want - 64 * sizeof(float) || got_b > want + 64 * sizeof(float) || other != 0)
    RM_TEST_FAIL("rank %d: %s %llu bytes (other ways %llu), the ring moves %llu", r, way,
                 (unsigned long long)got_b, (unsigned long long)other, (unsigned long long)want);
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
  rm_agg_config_t agg;
  rm_agg_config_init(&agg);
  if (rm_aggregate(c, d, d, count, RM_F32, &agg, NULL) != RM_ERR_UNSUPPORTED)
    RM_TEST_FAIL("rm_aggregate took device memory (it computes on the CPU)");
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

/* ---- nccl ---- */
static int nccl_suite(rm_comm_t *c, int want_nccl)
{
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  size_t count = 100003;
  rm_allreduce_info_t info;
  float *h = input(r, count), *got = malloc(count * n * sizeof *got);
  void *d = dev_input(r, count), *d2 = rm_test_dev_alloc(count * n * sizeof(float));
  void *dn = rm_test_dev_alloc(count * (n < 2 ? 2 : n) * sizeof(float)); /* f64 fits */
  rm_algo_t want = want_nccl ? RM_ALGO_NCCL : RM_ALGO_AUTO;
  /* all-reduce: f32 sum */
  rm_status_t st = rm_allreduce_ex(c, d, d2, count, RM_F32, RM_SUM, RM_ALGO_AUTO, &info);
  if (st != RM_OK) RM_TEST_FAIL("rank %d: allreduce: %s", r, rm_comm_last_error(c));
  rm_test_dev_get(got, d2, count * sizeof(float));
  bad += check_sum(got, count, n);
  /* TEST_DEVICE_NCCL_EXPECT=any (scripts/gpu-check: several ranks on one GPU,
   * which NCCL refuses): NCCL or the agreed fallback, both exact */
  const char *expect = getenv("TEST_DEVICE_NCCL_EXPECT");
  if (r == 0) printf("all-reduce ran on %s\n", rm_algo_name(info.algorithm));
  if ((!expect || strcmp(expect, "any")) &&
      (info.algorithm == RM_ALGO_NCCL) != (want == RM_ALGO_NCCL)) {
    fprintf(stderr, "rank %d: all-reduce ran %s\n", r, rm_algo_name(info.algorithm));
    bad++;
  }
  /* all-reduce: i32 max, f64 avg (in place) */
  int32_t *ih = malloc(count * sizeof *ih);
  double *dh = malloc(count * sizeof *dh);
  for (size_t i = 0; i < count; i++) ih[i] = (int32_t)((i * 7 + (size_t)r * 13) % 101), dh[i] = r + (double)(i % 5);
  rm_test_dev_put(dn, ih, count * sizeof *ih);
  if (rm_allreduce(c, dn, dn, count, RM_I32, RM_MAX) != RM_OK) RM_TEST_FAIL("max");
  rm_test_dev_get(ih, dn, count * sizeof *ih);
  for (size_t i = 0; i < count; i++) {
    int32_t m = 0;
    for (int q = 0; q < n; q++) {
      int32_t v = (int32_t)((i * 7 + (size_t)q * 13) % 101);
      m = v > m ? v : m;
    }
    if (ih[i] != m) { bad++; fprintf(stderr, "rank %d: max at %zu\n", r, i); break; }
  }
  rm_test_dev_put(dn, dh, count * sizeof *dh);
  if (rm_allreduce(c, dn, dn, count, RM_F64, RM_AVG) != RM_OK) RM_TEST_FAIL("avg");
  rm_test_dev_get(dh, dn, count * sizeof *dh);
  for (size_t i = 0; i < count; i++)
    if (dh[i] != (double)(n - 1) / 2.0 + (double)(i % 5)) { bad++; fprintf(stderr, "avg at %zu\n", i); break; }
  /* broadcast from rank n-1 */
  rm_test_dev_put(dn, h, count * sizeof(float));
  if (rm_broadcast(c, dn, count, RM_F32, n - 1) != RM_OK) RM_TEST_FAIL("broadcast");
  rm_test_dev_get(got, dn, count * sizeof(float));
  for (size_t i = 0; i < count; i++)
    if (got[i] != (float)(n - 1 + (int)(i % 97))) { bad++; fprintf(stderr, "bcast at %zu\n", i); break; }
  /* reduce to rank 0 */
  if (rm_reduce(c, d, r == 0 ? d2 : NULL, count, RM_F32, RM_SUM, 0) != RM_OK) RM_TEST_FAIL("reduce");
  if (r == 0) {
    rm_test_dev_get(got, d2, count * sizeof(float));
    bad += check_sum(got, count, n);
  }
  /* all-gather */
  if (rm_allgather(c, d, d2, count, RM_F32) != RM_OK) RM_TEST_FAIL("allgather");
  rm_test_dev_get(got, d2, count * n * sizeof(float));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      if (got[(size_t)q * count + i] != (float)(q + (int)(i % 97))) { bad++; q = n; break; }
  /* reduce-scatter: input = n blocks of count, block b of rank q = q + b + i%97 */
  for (int b = 0; b < n; b++)
    for (size_t i = 0; i < count; i++) got[(size_t)b * count + i] = (float)(r + b + (int)(i % 97));
  rm_test_dev_put(d2, got, count * n * sizeof(float));
  if (rm_reduce_scatter(c, d2, dn, count, RM_F32, RM_SUM) != RM_OK) RM_TEST_FAIL("reduce_scatter");
  rm_test_dev_get(got, dn, count * sizeof(float));
  for (size_t i = 0; i < count; i++)
    if (got[i] != (float)(n * (r + (int)(i % 97)) + n * (n - 1) / 2)) { bad++; fprintf(stderr, "rs at %zu: %g\n", i, got[i]); break; }
  /* all-to-all: block j of rank q = 1000 q + j */
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < count; i++) got[(size_t)j * count + i] = (float)(1000 * r + j);
  rm_test_dev_put(d2, got, count * n * sizeof(float));
  if (rm_alltoall(c, d2, dn, count, RM_F32) != RM_OK) RM_TEST_FAIL("alltoall: %s", rm_comm_last_error(c));
  rm_test_dev_get(got, dn, count * n * sizeof(float));
  for (int j = 0; j < n; j++)
    if (got[(size_t)j * count + 7] != (float)(1000 * j + r)) { bad++; fprintf(stderr, "a2a block %d\n", j); }
  /* host memory on the same communicator: ringmaster's algorithms */
  if (rm_allreduce_ex(c, h, h, count, RM_F32, RM_SUM, RM_ALGO_AUTO, &info) != RM_OK) RM_TEST_FAIL("host");
  bad += check_sum(h, count, n);
  if (info.algorithm == RM_ALGO_NCCL) { bad++; fprintf(stderr, "host all-reduce on NCCL\n"); }
  rm_test_dev_free(d);
  rm_test_dev_free(d2);
  rm_test_dev_free(dn);
  free(h); free(got); free(ih); free(dh);
  return bad;
}

static int rank_nccl(rm_test_world_t *w, int r, void *arg)
{
  const fault_t *f = arg;
  int off = !strcmp(f->mode, "nccl_off");
  if (off && r == 1) { /* no NCCL library: the stand-in's path replaced */
    setenv("RINGMASTER_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
  }
  rm_comm_t *c = open_rank(w, r, 0);
  if (!c) RM_TEST_FAIL("init");
  rm_comm_set_algorithm(c, RM_ALGO_NCCL);
  int bad = nccl_suite(c, !off);
  rm_comm_destroy(c);
  return bad ? 1 : 0;
}

static int rank_nccl_kill(rm_test_world_t *w, int r, void *arg)
{
  const fault_t *f = arg;
  rm_comm_t *c = open_rank(w, r, 1500);
  if (!c) return 1;
  rm_comm_set_algorithm(c, RM_ALGO_NCCL);
  void *d = dev_input(r, 1 << 18);
  rm_status_t st = RM_OK;
  for (int i = 0; i < 200 && st == RM_OK; i++) {
    if (r == f->victim && i == 5) kill(getpid(), SIGKILL);
    st = rm_allreduce(c, d, d, 1 << 18, RM_F32, RM_SUM);
    w->res[r].value = i + 1;
  }
  rm_test_dev_free(d);
  rm_test_finish(&w->res[r], c, st);
  return 0;
}

static int rank_nccl_abort(rm_test_world_t *w, int r, void *arg)
{
  rm_comm_t *c = open_rank(w, r, 20000);
  (void)arg;
  if (!c) return 1;
  rm_comm_set_algorithm(c, RM_ALGO_NCCL);
  void *d = dev_input(r, 1 << 16);
  rm_allreduce_info_t info;
  if (rm_allreduce_ex(c, d, d, 1 << 16, RM_F32, RM_SUM, RM_ALGO_AUTO, &info) != RM_OK ||
      info.algorithm != RM_ALGO_NCCL)
    RM_TEST_FAIL("rank %d: first NCCL all-reduce: %s", r, rm_comm_last_error(c));
  if (r == 1) { /* stops taking part; leaves once rank 0 is done */
    while (!w->res[0].done) usleep(10000);
    rm_test_dev_free(d);
    rm_comm_destroy(c);
    return 0;
  }
  pthread_t th;
  pthread_create(&th, NULL, aborter, c);
  rm_status_t st = rm_allreduce(c, d, d, 1 << 16, RM_F32, RM_SUM);
  pthread_join(th, NULL);
  if (st != RM_ERR_ABORTED) RM_TEST_FAIL("NCCL all-reduce after abort: %s (%s)", rm_status_name(st), rm_comm_last_error(c));
  rm_test_dev_free(d);
  rm_comm_destroy(c);
  return 0;
}

/* ---- masked ---- */
static int rank_masked(rm_test_world_t *w, int r, void *arg)
{
  size_t count = 1 << 16;
  int n = w->world;
  rm_comm_t *c = open_rank(w, r, 0);
  float *h = input(r, count), *junk = malloc(count * sizeof *junk), *got = malloc(count * sizeof *got);
  void *ds = rm_test_dev_alloc(count * sizeof(float)), *dr = rm_test_dev_alloc(count * sizeof(float));
  uint8_t member[RM_TEST_MAX_WORLD];
  (void)arg;
  if (!c || !junk || !got || !ds || !dr || rm_test_dev_put(ds, h, count * sizeof(float)) != 0)
    RM_TEST_FAIL("rank %d: setup", r);
  for (size_t i = 0; i < count; i++) junk[i] = 1000.0f + (float)r;
  for (int round = 0; round < 6; round++) {
    int k = 0, contrib = -1, inplace = round % 2;
    for (int q = 0; q < n; q++) k += member[q] = (q + round) % 3 != 0;
    if (k == 0) k = member[0] = 1;
    /* a member in place starts from its input, anyone else from junk */
    if (rm_test_dev_put(dr, member[r] && inplace ? h : junk, count * sizeof(float)) != 0)
      RM_TEST_FAIL("rank %d: put", r);
    rm_status_t st = rm__masked_allreduce(c, member[r] ? (inplace ? dr : ds) : NULL, dr, count,
                                          RM_F32, RM_AVG, member, 0, &contrib);
    if (st != RM_OK)
      RM_TEST_FAIL("rank %d round %d: %s (%s)", r, round, rm_status_name(st), rm_comm_last_error(c));
    if (contrib != k) RM_TEST_FAIL("rank %d round %d: %d contributors, want %d", r, round, contrib, k);
    if (rm_test_dev_get(got, dr, count * sizeof(float)) != 0) RM_TEST_FAIL("rank %d: get", r);
    for (size_t i = 0; i < count; i++) {
      float sum = 0;
      for (int q = 0; q < n; q++) sum += member[q] ? (float)(q + (int)(i % 97)) : 0;
      if (got[i] != sum / (float)k)
        RM_TEST_FAIL("rank %d round %d [%zu]: %g, want %g", r, round, i, got[i], sum / (float)k);
    }
  }
  rm_test_dev_get(got, ds, count * sizeof(float));
  if (memcmp(got, h, count * sizeof(float)) != 0) RM_TEST_FAIL("rank %d: send buffer changed", r);
  rm_test_dev_free(ds);
  rm_test_dev_free(dr);
  free(h);
  free(junk);
  free(got);
  rm_comm_destroy(c);
  return 0;
}

/* ---- nccl_relay ---- */
static int rank_nccl_relay(rm_test_world_t *w, int r, void *arg)
{
  size_t count = 4096;
  int n = w->world;
  rm_comm_t *c = open_rank(w, r, 0);
  void *d = dev_input(r, count);
  float *got = malloc(count * sizeof *got);
  rm_allreduce_info_t info;
  (void)arg;
  if (!c || !got) RM_TEST_FAIL("rank %d: setup", r);
  if (r == 1) { /* a relayed id only this rank has */
    rm__nccl_id_t id;
    memset(&id, 7, sizeof id);
    rm__nccl_set_id(c, &id);
  }
  rm_comm_set_algorithm(c, RM_ALGO_NCCL);
  rm_status_t st = rm_allreduce_ex(c, d, d, count, RM_F32, RM_SUM, RM_ALGO_AUTO, &info);
  if (st != RM_OK) RM_TEST_FAIL("rank %d: %s (%s)", r, rm_status_name(st), rm_comm_last_error(c));
  rm_test_dev_get(got, d, count * sizeof(float));
  for (size_t i = 0; i < count; i++) {
    float want = (float)(n * (n - 1) / 2 + n * (int)(i % 97));
    if (got[i] != want) RM_TEST_FAIL("rank %d [%zu]: %g, want %g", r, i, got[i], want);
  }
  if (info.algorithm != RM_ALGO_NCCL || info.predicted_us != 0)
    RM_TEST_FAIL("rank %d: ran %s, predicted %g us: want nccl, no prediction", r,
                 rm_algo_name(info.algorithm), info.predicted_us);
  rm_test_dev_free(d);
  free(got);
  rm_comm_destroy(c);
  return 0;
}

/* /dev/shm entries named like the stand-in NCCL's segments (the tests
 * that make them share the RESOURCE_LOCK nccl_standin, so the count is
 * this test's own). */
static int nccl_segments(void) { return rm_test_shm_count("rm-nccl-"); }

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
  else if (!strcmp(mode, "ipc") || !strcmp(mode, "gdr")) fn = rank_staged;
  else if (!strcmp(mode, "kinds")) fn = rank_kinds;
  else if (!strcmp(mode, "abort")) { fn = rank_abort; world = 2; }
  else if (!strcmp(mode, "illegal")) fn = rank_fault;
  else if (!strcmp(mode, "stall")) { fn = rank_fault; f.victim = 2; }
  else if (!strcmp(mode, "kill")) { fn = rank_fault; f.victim = 2; world = 4; }
  else if (!strcmp(mode, "nccl") || !strcmp(mode, "nccl_off")) fn = rank_nccl;
  else if (!strcmp(mode, "nccl_kill")) { fn = rank_nccl_kill; f.victim = 2; }
  else if (!strcmp(mode, "nccl_abort")) { fn = rank_nccl_abort; world = 2; }
  else if (!strcmp(mode, "masked")) { fn = rank_masked; world = 4; }
  else if (!strcmp(mode, "nccl_relay")) fn = rank_nccl_relay;
  if (getenv("TEST_DEVICE_WORLD")) world = atoi(getenv("TEST_DEVICE_WORLD"));
  if (fn == NULL || world < 1 || (f.victim >= world && (fn == rank_fault || fn == rank_nccl_kill))) {
    fprintf(stderr, "usage: test_device staged|ipc|gdr|kinds|masked|illegal|stall|kill|abort|"
                    "nccl|nccl_off|nccl_kill|nccl_abort|nccl_relay\n");
    return 2;
  }
  int segs = nccl_segments();
  if (rm_test_world_open(&w, world) != 0) return 1;
  if (rm_test_start(&w, fn, &f) != 0) return 1;
  int killed = !strcmp(mode, "kill") || !strcmp(mode, "nccl_kill");
  bad = rm_test_wait(&w, 90000, killed ? f.victim : -1);
  if (fn == rank_fault) bad += check_fault(&w, &f);
  if (fn == rank_nccl_kill)
    for (int r = 0; r < world; r++) {
      if (r == f.victim) continue;
      printf("rank %d: %s after %g collectives: %s\n", r, rm_status_name(w.res[r].status),
             w.res[r].value, w.res[r].msg);
      if (w.res[r].status == RM_OK || strstr(w.res[r].msg, "nccl:") == NULL) {
        fprintf(stderr, "rank %d: want an nccl: failure\n", r);
        bad++;
      }
    }
  if (nccl_segments() != segs) {
    fprintf(stderr, "NCCL stand-in segments left in /dev/shm: %d (were %d)\n", nccl_segments(), segs);
    bad++;
  }
  bad += rm_test_shm_leftovers(&w);
  rm_test_world_close(&w);
  printf("device %s: %s\n", mode, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
