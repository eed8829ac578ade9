/*
 * rm_bench - all-reduce bandwidth benchmark, nccl-tests style, over the
 * public API only.
 *
 *   rm_bench [-n WORLD] [-b MIN] [-e MAX] [-f FACTOR] [-s SIZE,SIZE...]
 *            [-a ALGO,ALGO...] [-t DTYPE] [-i ITERS] [-w WARMUP] [-m host|device]
 *   rm_bench --rank R --world N --peers H:P,H:P,...   (one rank per process,
 *            e.g. one per network namespace; only rank 0 prints)
 *
 * Defaults: WORLD 2 (forked on 127.0.0.1), sizes 8 B .. 256 MiB x2, every
 * algorithm and auto, f32 sum. Method (same as bench/peers): in place;
 * per iteration restore the input from a pristine copy (untimed), barrier,
 * time one rm_allreduce_ex, take the max over ranks (untimed all-reduce),
 * check every element (untimed). Inputs (r+1)*((i%1021)+1) (f32/f64/ints;
 * (r+1)*((i%7)+1) for f16/bf16/u8) so sums are exact. Per size and algorithm
 * one line: size, count, type, op, algorithm (auto: "auto>ring" = what auto
 * ran), median us, algbw = bytes/median (GB/s, 1e9), busbw = algbw*2(N-1)/N,
 * #wrong = wrong elements over all ranks and iterations.
 *
 * -m device: the buffer is device memory (bench_dev.h: CUDA, or the
 * stand-in GPU in a test-hook build); the input is restored by a device
 * copy and checked after a copy to the host, both untimed. What carries it
 * depends on the pairs (staged through host memory; CUDA IPC between ranks
 * of one host unless RINGMASTER_CUDA_IPC=0; GPUDirect RDMA) and -a nccl
 * runs NCCL: the header says which. -a nccl-direct (device, CUDA builds)
 * calls NCCL itself on the same buffer (bench_nccl.c), the reference for
 * NCCL through ringmaster.
 */
#define ALGO_NCCL_DIRECT RM_ALGO_COUNT /* a pseudo-algorithm of this bench */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ringmaster/ringmaster.h"
#include "bench_dev.h"
#include "bench_nccl.h"
#include "bench_fork.h"

#define MAX_SIZES 64
#define MAX_WORLD 64

typedef struct opts {
  size_t sizes[MAX_SIZES];
  int nsizes;
  rm_algo_t algos[8];
  int nalgos;
  rm_dtype_t dt;
  int iters, warmup;
  int device; /* -m device */
} opts_t;


static int small_type(rm_dtype_t dt) { return dt == RM_F16 || dt == RM_BF16 || dt == RM_U8; }

static double in_val(rm_dtype_t dt, int r, size_t i)
{
  return (double)(r + 1) * (double)(small_type(dt) ? i % 7 + 1 : i % 1021 + 1);
}

/* f16/bf16 of a small integer (exact): built from the bits directly. */
static uint16_t half_of(double v, int bf)
{
  int e = 0;
  unsigned m = (unsigned)v;
  if (m == 0) return 0;
  while ((m >> e) > 1) e++;
  if (bf) return (uint16_t)(((unsigned)(e + 127) << 7) | ((m << 7 >> e) & 0x7F));
  return (uint16_t)(((unsigned)(e + 15) << 10) | ((m << 10 >> e) & 0x3FF));
}

static void put(void *b, size_t i, rm_dtype_t dt, double v)
{
  switch (dt) {
  case RM_F32: ((float *)b)[i] = (float)v; break;
  case RM_F64: ((double *)b)[i] = v; break;
  case RM_F16: ((uint16_t *)b)[i] = half_of(v, 0); break;
  case RM_BF16: ((uint16_t *)b)[i] = half_of(v, 1); break;
  case RM_I32: ((int32_t *)b)[i] = (int32_t)v; break;
  case RM_I64: ((int64_t *)b)[i] = (int64_t)v; break;
  default: ((uint8_t *)b)[i] = (uint8_t)v; break;
  }
}

static int iters_for(const opts_t *o, size_t bytes)
{
  size_t it = ((size_t)256 << 20) / (bytes ? bytes : 1);
  if (o->iters > 0) return o->iters;
  if (it > 200) it = 200;
  if (it < 5) it = 5;
  return (int)it;
}

/* One (size, algorithm) cell: returns 0 or -1 on a collective error. */
/* Device runs: the device buffer and the device copy of the input; buf
 * and pristine are then host memory the result is checked in. */
static char *g_dbuf, *g_dpristine;

static int run_cell(rm_comm_t *c, const opts_t *o, size_t bytes, rm_algo_t algo,
                    char *buf, char *pristine, char *want)
{
  int n = rm_comm_world(c), r = rm_comm_rank(c), it = iters_for(o, bytes);
  size_t es = rm_dtype_size(o->dt), count = bytes / es ? bytes / es : 1;
  double *t = calloc((size_t)it, sizeof(double));
  double wrong = 0;
  rm_allreduce_info_t info = {0};
  char *work = o->device ? g_dbuf : buf;
  for (int k = -o->warmup; k < it; k++) {
    if (o->device) {
      if (rm_bench_dev_copy(g_dbuf, g_dpristine, count * es) != 0) goto fail;
    } else {
      memcpy(buf, pristine, count * es);
    }
    if (rm_barrier(c) != RM_OK) goto fail;
    double t0 = rm_bench_now_us();
    if (algo == ALGO_NCCL_DIRECT) {
      if (rm_bench_nccl_direct(c, work, count, o->dt) != 0) goto fail; /* -m device: main */
      info.algorithm = ALGO_NCCL_DIRECT;
    } else if (rm_allreduce_ex(c, work, work, count, o->dt, RM_SUM, algo, &info) != RM_OK) {
      goto fail;
    }
    double dt = rm_bench_now_us() - t0;
    if (rm_allreduce(c, &dt, &dt, 1, RM_F64, RM_MAX) != RM_OK) goto fail;
    if (k >= 0) t[k] = dt;
    if (o->device && rm_bench_dev_copy(buf, g_dbuf, count * es) != 0) goto fail;
    if (memcmp(buf, want, count * es) != 0) /* count elements only when wrong */
      for (size_t i = 0; i < count; i++)
        if (memcmp(buf + i * es, want + i * es, es) != 0) wrong++;
  }
  if (rm_allreduce(c, &wrong, &wrong, 1, RM_F64, RM_SUM) != RM_OK) goto fail;
  qsort(t, (size_t)it, sizeof t[0], rm_bench_cmp_double);
  if (r == 0) {
    double med = t[it / 2], algbw = (double)(count * es) / med / 1e3;
    char name[32];
    /* "auto>ring": what auto chose; "hierarchical>ring": what ran instead
     * (one host, or hosts of unequal size) */
    int other = info.algorithm != algo;
    snprintf(name, sizeof name, "%s%s%s", algo == ALGO_NCCL_DIRECT ? "nccl-direct" : rm_algo_name(algo),
             other ? ">" : "", other ? rm_algo_name(info.algorithm) : "");
    printf("%12zu %12zu %5s %4s %2d %-15s %11.1f %9.3f %9.3f %7.0f\n", count * es, count,
           rm_dtype_name(o->dt), "sum", n, name, med, algbw,
           algbw * 2.0 * (n - 1) / n, wrong);
    fflush(stdout);
  }
  free(t);
  return 0;
fail:
  fprintf(stderr, "rank %d: all-reduce failed: %s\n", r, rm_comm_last_error(c));
  free(t);
  return -1;
}

static int bench_rank(rm_comm_t *c, const opts_t *o)
{
  size_t maxb = 0, es = rm_dtype_size(o->dt);
  int rc = 0, n = rm_comm_world(c), r = rm_comm_rank(c);
  for (int s = 0; s < o->nsizes; s++) maxb = o->sizes[s] > maxb ? o->sizes[s] : maxb;
  size_t maxc = maxb / es + 1;
  char *buf = malloc(maxc * es), *pristine = malloc(maxc * es), *want = malloc(maxc * es);
  if (!buf || !pristine || !want) { fprintf(stderr, "no memory\n"); return 1; }
  for (size_t i = 0; i < maxc; i++) {
    put(pristine, i, o->dt, in_val(o->dt, r, i));
    put(want, i, o->dt, in_val(o->dt, 0, i) * n * (n + 1) / 2);
  }
  if (o->device) {
    char why[256];
    if (rm_bench_dev_init(why, sizeof why) != 0) {
      fprintf(stderr, "rank %d: -m device: %s\n", r, why);
      return 1;
    }
    g_dbuf = rm_bench_dev_alloc(maxc * es);
    g_dpristine = rm_bench_dev_alloc(maxc * es);
    if (!g_dbuf || !g_dpristine || rm_bench_dev_copy(g_dpristine, pristine, maxc * es) != 0) {
      fprintf(stderr, "rank %d: no device memory for %zu bytes\n", r, maxc * es);
      return 1;
    }
  }
  if (r == 0) {
    printf("# rm_bench: world %d, rank 0's pairs:", n);
    for (int p = 1; p < n; p++) printf(" %d %s%s", p, rm_comm_transport(c, p), p + 1 < n ? "," : "");
    printf("\n");
  }
  if (r == 0 && o->device)
    printf("# rm_bench: device buffers (CUDA IPC between ranks of one host: %s)\n",
           getenv("RINGMASTER_CUDA_IPC") && !strcmp(getenv("RINGMASTER_CUDA_IPC"), "0")
               ? "off" : "on where both offer it");
  if (r == 0)
    printf("# rm_bench: world %d, in place, time = median over iterations of the max over ranks\n"
           "# %10s %12s %5s %4s %2s %-15s %11s %9s %9s %7s\n", n, "size(B)", "count", "type",
           "op", "n", "algorithm", "time(us)", "algbw", "busbw", "#wrong");
  for (int s = 0; s < o->nsizes && rc == 0; s++)
    for (int a = 0; a < o->nalgos && rc == 0; a++)
      rc = run_cell(c, o, o->sizes[s], o->algos[a], buf, pristine, want);
  free(buf); free(pristine); free(want);
  if (o->device) {
    rm_bench_dev_free(g_dbuf);
    rm_bench_dev_free(g_dpristine);
  }
  return rc ? 1 : 0;
}

static int run_one(int rank, int world, const char **peers, rm_endpoint_t *ep,
                   const void *arg)
{
  const opts_t *o = arg;
  rm_comm_t *c;
  if (rm_bench_comm(rank, world, peers, ep, 0, &c) != RM_OK) return 1;
  int rc = bench_rank(c, o);
  rm_comm_destroy(c);
  return rc;
}

static int run_forked(int world, const opts_t *o)
{
  return rm_bench_run_forked(world, run_one, o);
}

static int parse_list(char *arg, char **items, int max)
{
  int k = 0;
  char *save = NULL;
  for (char *tok = strtok_r(arg, ",", &save); tok && k < max; tok = strtok_r(NULL, ",", &save))
    items[k++] = tok;
  return k;
}

static void usage(void)
{
  fprintf(stderr, "usage: rm_bench [-n WORLD] [-b MIN] [-e MAX] [-f FACTOR] [-s SIZES]\n"
                  "  [-a ALGOS] [-t DTYPE] [-i ITERS] [-w WARMUP] [-m host|device]\n"
                  "  [--rank R --world N --peers H:P,...]\n"
                  "  [--rank R --world N --rendezvous DIR --bind IP]\n");
}

int main(int argc, char **argv)
{
  opts_t o = {.dt = RM_F32, .warmup = 2};
  size_t minb = 8, maxb = (size_t)256 << 20, factor = 2;
  int world = 2, rank = -1;
  char *peers_arg = NULL, *algos_arg = NULL, *sizes_arg = NULL, *items[MAX_WORLD];
  char *rdv = NULL, *bind_ip = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) { usage(); return 2; }
    i++;
    if (!strcmp(a, "-n") || !strcmp(a, "--world")) world = atoi(v);
    else if (!strcmp(a, "--rank")) rank = atoi(v);
    else if (!strcmp(a, "--peers")) peers_arg = strdup(v);
    else if (!strcmp(a, "--rendezvous")) rdv = strdup(v);
    else if (!strcmp(a, "--bind")) bind_ip = strdup(v);
    else if (!strcmp(a, "-b")) minb = strtoull(v, NULL, 0);
    else if (!strcmp(a, "-e")) maxb = strtoull(v, NULL, 0);
    else if (!strcmp(a, "-f")) factor = strtoull(v, NULL, 0);
    else if (!strcmp(a, "-s")) sizes_arg = strdup(v);
    else if (!strcmp(a, "-a")) algos_arg = strdup(v);
    else if (!strcmp(a, "-i")) o.iters = atoi(v);
    else if (!strcmp(a, "-w")) o.warmup = atoi(v);
    else if (!strcmp(a, "-m")) {
      if (strcmp(v, "host") && strcmp(v, "device")) { usage(); return 2; }
      o.device = !strcmp(v, "device");
    }
    else if (!strcmp(a, "-t")) {
      if (rm_dtype_parse(v, &o.dt) != RM_OK) { usage(); return 2; }
    } else { usage(); return 2; }
  }
  if (sizes_arg) {
    int k = parse_list(sizes_arg, items, MAX_SIZES);
    for (int j = 0; j < k; j++) o.sizes[o.nsizes++] = strtoull(items[j], NULL, 0);
  } else {
    for (size_t b = minb; b <= maxb && o.nsizes < MAX_SIZES; b *= (factor > 1 ? factor : 2))
      o.sizes[o.nsizes++] = b;
  }
  if (algos_arg) {
    int k = parse_list(algos_arg, items, 8);
    for (int j = 0; j < k; j++) {
      if (!strcmp(items[j], "nccl-direct")) o.algos[o.nalgos++] = ALGO_NCCL_DIRECT;
      else if (rm_algo_parse(items[j], &o.algos[o.nalgos++]) != RM_OK) { usage(); return 2; }
    }
  } else {
    rm_algo_t all[] = {RM_ALGO_RING, RM_ALGO_HALVING_DOUBLING, RM_ALGO_BUTTERFLY,
                       RM_ALGO_TREE, RM_ALGO_HIERARCHICAL, RM_ALGO_AUTO};
    memcpy(o.algos, all, sizeof all);
    o.nalgos = 6;
  }
  if (world < 1 || world > MAX_WORLD) { usage(); return 2; }
  for (int j = 0; j < o.nalgos; j++)
    if (o.algos[j] == ALGO_NCCL_DIRECT && !o.device) { /* it calls NCCL on device memory */
      fprintf(stderr, "rm_bench: -a nccl-direct needs -m device\n");
      usage();
      return 2;
    }
  if (rank < 0)
    return run_forked(world, &o);
  if (rdv) { /* ranks started one by one: offers too, so hosts use shm inside */
    const char *peers[MAX_WORLD];
    rm_endpoint_t *ep = NULL;
    if (rm_bench_rendezvous(rdv, rank, world, bind_ip ? bind_ip : "127.0.0.1", &ep, peers))
      return 1;
    int rc = run_one(rank, world, peers, ep, &o);
    rm_endpoint_close(ep);
    return rc;
  }
  if (!peers_arg || parse_list(peers_arg, items, MAX_WORLD) != world) { usage(); return 2; }
  return run_one(rank, world, (const char **)items, NULL, &o);
}
