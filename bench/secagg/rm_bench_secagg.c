/*
 * rm_bench_secagg - secure aggregation (worker/secagg/) against plain
 * rm_allreduce of the same f32 vector, nccl-tests style, one forked process
 * per rank on 127.0.0.1, in the same run.
 *
 *   rm_bench_secagg [-n WORLD,WORLD...] [-c COUNT,COUNT...] [-i ITERS]
 *                   [-k MAXN]
 *
 * Defaults: worlds 2, 4, 8; counts 1M and 16M floats; 5 timed iterations
 * after one warm-up; -k 4096 for the simulated key round.
 *
 * Table 1, per (world, count): plain rm_allreduce(f32, SUM) and the secure
 * sum with neighbours "all" and "log": the median over iterations of the
 * slowest rank's time per call (barrier before each), algbw = bytes / time,
 * the bytes rank 0 sent per call relative to plain, time relative to plain,
 * the CPU time of every rank's process together per call (median; on a
 * machine with fewer cores than ranks, or loaded by others, this is the
 * figure that does not depend on the scheduler) and its ratio to plain's,
 * and the secure sum's phases on rank 0 (mask, reduce, open, unmask; the
 * sharded UNMASK's all-gather counts in unmask). The
 * relay of this benchmark is a TEST DOUBLE: an all-gather over the data
 * plane itself in place of the coordinator's barrier (a loopback round trip
 * either way; the coordinator's is in bench/results/2026-12-06-performance-record.md). Its
 * bytes are left out of "bytes", which counts the sum's payload.
 * "keys ms" is rm__secagg_open (KEYS + CONFIRM), once per generation. The
 * threshold is the default, N / 2 + 1 (at least 2), so that many ranks are
 * guards (one self-mask keystream each at UNMASK).
 *
 * Dropouts: a member lost during a call costs the survivors that call's
 * work so far (at most the whole call at `world`), a re-formed generation's
 * keys at the smaller world and the call again there. With 30 % dropped
 * the redo row composes those measured cells: keys(0.7 N) + sum(0.7 N),
 * beside one sum at N (detection and re-forming are the coordinator's,
 * measured by bench/recovery).
 *
 * Table 2 (one process, simulated members): what one member computes in the
 * key round at world N (N - 1 X25519 + BLAKE2b seeds, timed; the relay's
 * answer of 44 N bytes) and its mask of 1M lanes with N - 1 ("all") or
 * 2 ceil(log2 N) ("log") neighbours: the SecAgg+ crossover, computed as the
 * degree times one neighbour's measured mask time (a mask is one keystream
 * per neighbour).
 */
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_fork.h"
#include "ringmaster/ringmaster.h"
#include "secagg/secagg.h"
#include "secagg/secagg_int.h"

#define MAXW 64

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* this process's CPU time (every thread: the transport's too), ms */
static double cpu_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  size_t counts[8];
  int ncounts, iters;
} opts_t;

/* The relay double: an all-gather over the data plane. */
static rm_status_t relay_ag(void *ctx, const char *name, const void *mine,
                            size_t len, void *all, char *err, size_t errlen)
{
  (void)name;
  rm_status_t st = rm_allgather(ctx, mine, all, len, RM_U8);
  if (st != RM_OK) snprintf(err, errlen, "relay all-gather: %s", rm_status_name(st));
  return st;
}

/* Slowest rank's time of t (ms): a max all-reduce. */
static double slowest(rm_comm_t *c, double t)
{
  rm_allreduce(c, &t, &t, 1, RM_F64, RM_MAX);
  return t;
}

/* mode 0 plain, 1 secure all, 2 secure log. Prints rank 0's row. */
static int cell(rm_comm_t *c, int mode, size_t count, int iters, float *buf,
                const float *in, double *plain_ms, size_t *plain_bytes)
{
  int rank = rm_comm_rank(c), world = rm_comm_world(c);
  double t[32], cpu[32], ph[4] = {0}, keys = 0;
  size_t bytes = 0;
  rm__secagg_t *sa = NULL;
  char err[256];
  if (mode) {
    rm__secagg_params_t p = {.bits = 32, .clip = 1.0, .threshold = world / 2 + 1,
                             .neighbours_log = mode == 2, .job_id = 1,
                             .generation = (uint64_t)mode};
    rm__secagg_relay_t relay = {c, relay_ag};
    rm_barrier(c);
    double t0 = now_ms();
    if (rm__secagg_open(c, &p, &relay, &sa, err, sizeof err) != RM_OK) {
      fprintf(stderr, "rank %d: open: %s\n", rank, err);
      return 1;
    }
    keys = slowest(c, now_ms() - t0);
  }
  for (int k = -1; k < iters; k++) {
    memcpy(buf, in, count * sizeof *buf);
    rm_barrier(c);
    double t0 = now_ms(), c0 = cpu_ms();
    rm_status_t st;
    if (!mode) {
      rm_allreduce_info_t ai = {0};
      st = rm_allreduce_ex(c, buf, buf, count, RM_F32, RM_SUM, RM_ALGO_AUTO, &ai);
      bytes = ai.bytes_sent;
    } else {
      rm__secagg_stats_t s;
      memset(&s, 0, sizeof s);
      st = rm__secagg_sum_f32(sa, buf, buf, count, 0, NULL, NULL, &s, err, sizeof err);
      bytes = s.bytes_sent;
      if (k >= 0) {
        ph[0] += s.ms_mask / iters;
        ph[1] += s.ms_reduce / iters;
        ph[2] += s.ms_open / iters;
        ph[3] += s.ms_unmask / iters;
      }
    }
    if (st != RM_OK) {
      fprintf(stderr, "rank %d: %s: %s\n", rank, mode ? "secure sum" : "allreduce",
              rm_status_name(st));
      rm__secagg_close(sa);
      return 1;
    }
    double dt = slowest(c, now_ms() - t0), dc = cpu_ms() - c0;
    rm_allreduce(c, &dc, &dc, 1, RM_F64, RM_SUM); /* every rank's CPU: the machine's cost */
    if (k >= 0) {
      t[k] = dt;
      cpu[k] = dc;
    }
  }
  rm__secagg_close(sa);
  qsort(t, (size_t)iters, sizeof *t, cmp_d);
  qsort(cpu, (size_t)iters, sizeof *cpu, cmp_d);
  double med = t[iters / 2], cmed = cpu[iters / 2];
  static double plain_cpu; /* rank 0's row of the plain cell, for the ratio */
  if (!mode) plain_cpu = cmed;
  if (!mode) {
    *plain_ms = med;
    *plain_bytes = bytes;
  }
  if (rank == 0) {
    static const char *names[] = {"plain", "secure all", "secure log"};
    double gb = (double)count * 4 / (med / 1e3) / 1e9;
    if (!mode)
      printf("| %d | %zu | %s | %.2f | %.3f | 1.00 | 1.00 | %.1f | 1.00 | | | | | |\n", world,
             count, names[mode], med, gb, cmed);
    else
      printf("| %d | %zu | %s | %.2f | %.3f | %.2f | %.2f | %.1f | %.2f | %.1f | %.1f | %.1f | "
             "%.1f | %.1f |\n",
             world, count, names[mode], med, gb,
             *plain_bytes ? (double)bytes / (double)*plain_bytes : 0, med / *plain_ms, cmed,
             plain_cpu > 0 ? cmed / plain_cpu : 0, ph[0], ph[1], ph[2], ph[3], keys);
    fflush(stdout);
  }
  return 0;
}

static int rank_main(int rank, int world, const char **peers, rm_endpoint_t *ep,
                     const void *arg)
{
  const opts_t *o = arg;
  rm_comm_t *c = NULL;
  if (rm_bench_comm(rank, world, peers, ep, 120000, &c) != RM_OK) return 1;
  for (int ci = 0; ci < o->ncounts; ci++) {
    size_t count = o->counts[ci];
    float *in = malloc(count * sizeof *in), *buf = malloc(count * sizeof *buf);
    if (!in || !buf) return 1;
    /* a gradient-like vector of norm about 0.5 (inside the clip of 1) */
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    double sd = 0.5 / sqrt((double)count);
    for (size_t i = 0; i < count; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      in[i] = (float)(sd * (((double)(x >> 11) / 9007199254740992.0) * 2 - 1) * 1.7);
    }
    double plain_ms = 0;
    size_t plain_bytes = 0;
    int rc = 0;
    for (int mode = 0; mode < 3 && !rc; mode++) {
      if (mode == 2 && rm__secagg_degree(world, 1) >= world - 1) continue; /* = all */
      rc = cell(c, mode, count, o->iters, buf, in, &plain_ms, &plain_bytes);
    }
    free(in);
    free(buf);
    if (rc) return rc;
  }
  rm_comm_destroy(c);
  return 0;
}

/* Table 2: one member's key-round compute and mask cost at simulated N. */
static void simulated(int maxn)
{
  uint8_t pk[2][32], sk[2][32], seed[32][32];
  crypto_box_keypair(pk[0], sk[0]);
  crypto_box_keypair(pk[1], sk[1]);
  size_t lanes = 1u << 20;
  uint32_t *v = calloc(lanes, sizeof *v);
  int nbr[32];
  for (int j = 0; j < 32; j++) randombytes_buf(seed[j], 32);
  /* mask cost per neighbour: 1M lanes, 4 neighbours, median of 3 */
  double per[3];
  for (int k = 0; k < 3; k++) {
    for (int j = 0; j < 4; j++) nbr[j] = j + 1;
    double t0 = now_ms();
    rm__secagg_mask_add(32, 0, nbr, 4, (const uint8_t(*)[32])seed, NULL, (uint64_t)k,
                        RM__SA_PAIR, v, 0, lanes);
    per[k] = (now_ms() - t0) / 4;
  }
  qsort(per, 3, sizeof *per, cmp_d);
  /* one seed: X25519 + BLAKE2b, median of 200 */
  double ts[200];
  for (int k = 0; k < 200; k++) {
    double t0 = now_ms();
    rm__secagg_seed(1, 1, 0, 1, sk[0], pk[0], pk[1], seed[0]);
    ts[k] = now_ms() - t0;
  }
  qsort(ts, 200, sizeof *ts, cmp_d);
  printf("\nOne member at a simulated world N (one process; measured: one seed "
         "%.1f us, one neighbour's mask of 1M lanes %.2f ms):\n\n", ts[100] * 1e3, per[1]);
  printf("| N | key round: seeds ms | relay answer KiB | mask 1M, all: neighbours | ms | "
         "mask 1M, log: neighbours | ms |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int n = 8; n <= maxn; n *= 4) {
    double t0 = now_ms();
    for (int k = 0; k < n - 1; k++) rm__secagg_seed(1, 1, 0, 1, sk[0], pk[0], pk[1], seed[0]);
    double keys = now_ms() - t0;
    int dl = rm__secagg_degree(n, 1);
    printf("| %d | %.1f | %.1f | %d | %.0f | %d | %.0f |\n", n, keys, 44.0 * n / 1024,
           n - 1, per[1] * (n - 1), dl, per[1] * dl);
  }
  free(v);
}

static int parse_list(const char *s, size_t *out, int max)
{
  int n = 0;
  while (*s && n < max) {
    char *end;
    out[n++] = strtoull(s, &end, 10);
    s = *end == ',' ? end + 1 : end;
    if (!*end) break;
  }
  return n;
}

int main(int argc, char **argv)
{
  opts_t o = {.counts = {1u << 20, 16u << 20}, .ncounts = 2, .iters = 5};
  size_t worlds[8] = {2, 4, 8};
  int nworlds = 3, maxn = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-n")) nworlds = parse_list(argv[i + 1], worlds, 8);
    else if (!strcmp(argv[i], "-c")) o.ncounts = parse_list(argv[i + 1], o.counts, 8);
    else if (!strcmp(argv[i], "-i")) o.iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-k")) maxn = atoi(argv[i + 1]);
  }
  if (o.iters < 1 || o.iters > 32 || sodium_init() < 0) return 2;
  printf("| N | floats | mode | time ms | algbw GB/s | bytes / plain | time / plain | "
         "cpu ms | cpu / plain | mask ms | reduce ms | open ms | unmask ms | keys ms |\n"
         "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
         "| ---: | ---: |\n");
  fflush(stdout);
  for (int w = 0; w < nworlds; w++)
    if (worlds[w] >= 2 && worlds[w] <= MAXW &&
        rm_bench_run_forked((int)worlds[w], rank_main, &o) != 0)
      fprintf(stderr, "world %zu failed\n", worlds[w]);
  simulated(maxn);
  return 0;
}
