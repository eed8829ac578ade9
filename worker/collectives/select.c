/*
 * select.c - the `auto` all-reduce choice: an alpha-beta-gamma cost model per
 * algorithm, calibrated lazily on the live links.
 *
 * Model (n bytes, N ranks, p = largest power of two <= N, d = ceil(log2 N),
 * fold = 2 alpha + 2 n beta + n gamma when N != p, else 0):
 *
 *   ring       2(N-1) alpha + 2 (N-1)/N n beta + (N-1)/N n gamma
 *   hd         2 log2(p) alpha + 2 (p-1)/p n HD_BW beta + (p-1)/p n gamma + fold
 *   butterfly  log2(p) (alpha + n beta + n gamma) + fold
 *   tree       2 d alpha + 2 d n beta + d n gamma   (root link carries d n
 *              each way; pipelining hides the depth, not that)
 *   hierarchical  (only when the ranks form H >= 2 hosts of L >= 2 each,
 *              collectives/hier.c; else infinite)
 *              2 (L-1) alpha/G + 2 (L-1)/L n beta/G + (L-1)/L n gamma
 *              + 2 (H-1) alpha + 2 (H-1)/H (n/L) beta + (H-1)/H (n/L) gamma
 *              with G = SHM_GAIN = 4: the calibrated links are the ring's
 *              (across hosts where the job spans hosts), shared memory is
 *              taken as 4x cheaper (3-6x measured on loopback).
 *              On 2 namespaces x 2 ranks with 1 Gbit tbf links
 *              (bench/hier_netns.sh, 2026-12-02) it measured 1.33x the
 *              ring's busbw at 1 MiB, 1.28x at 16 MiB and 1.36x at 64 MiB
 *              (the model says 2x: its two ranks per host share the host's
 *              link with two TCP flows), and 0.95x the best flat algorithm
 *              at 64 KiB, where the model may pick it. (Before the shared-
 *              memory bell of transport.c a rank in such a communicator
 *              polled in 1 ms slices and hierarchical measured 0.60-0.67x
 *              the ring; auto did not choose it then.)
 *
 * HD_BW = 1.25: measured, not derived. On TCP loopback halving-doubling
 * moves the same bytes as the ring but ran 25-35% slower from 16 MiB up
 * (n = 4 and 8, rm_bench, several runs): each step is one large exchange
 * with one partner, reduced after it lands, where the ring streams
 * segments through both neighbours at once. Without the factor hd's fewer
 * alphas made auto pick it at every large size (16 MiB, n = 4: 155-180 ms
 * vs the ring's 120 ms); with it hd still wins around 1 MiB, where its
 * fewer messages matter (n = 4: 1.1 ms vs 1.8 ms).
 *
 * alpha: one message's latency; beta: inverse bandwidth per byte while every
 * rank sends at once (what the algorithms do); gamma: reduction time per byte
 * (f32 sum). Calibration (rm__cost_calibrate), the first time auto is used:
 * every rank exchanges with its ring neighbours (send right, receive left,
 * all at once, each exchange after a barrier) 8-byte messages 16 times and
 * 256 KiB messages 8 times (medians), and times the f32 sum kernel on 256 KiB; then rank 0's three
 * numbers are broadcast, so every rank holds the same model and picks the
 * same algorithm. Before calibration (rm_allreduce_choose on a fresh
 * communicator) the defaults below are used.
 *
 * REUSE. A calibration costs 25 exchanges each behind a barrier: about
 * 10 ms on the 2-core VM at 2-4 ranks, half of what a re-formed job spent
 * between a lost member and its first step (worker/session/session.c
 * RE-FORMATION TIMELINE). The model's three numbers describe the links and
 * the reduce kernel, not the world (N enters the formulas above), so a
 * process keeps the last model it calibrated or received (REUSED below),
 * with its job and the set of transports of that communicator's pairs. At
 * its first auto call a communicator broadcasts one word and the three
 * numbers from rank 0: 1 when rank 0 holds a model of the same job and
 * the same transport set (a re-formed generation of the job, on the same
 * kinds of links), and then every rank takes them; else every rank
 * calibrates as above. Rank 0 alone decides, so the ranks agree even when
 * some hold no model (a replacement). Cost where nothing is reused: one
 * 32-byte broadcast (log2 N messages of alpha). A model measured at
 * another world size (shrink: one rank fewer on the same CPUs) is a
 * little pessimistic; auto may then pick a slower algorithm at a size near
 * a crossover, never a different result. RINGMASTER_CALIBRATE_REUSE=0
 * calibrates every communicator.
 *
 * Precedence of the algorithm for one call: rm_allreduce_ex's algo, else the
 * communicator's (rm_comm_set_algorithm, else RINGMASTER_ALGO), else auto.
 *
 * DETERMINISTIC jobs (cost.fixed, set by the session from the job spec):
 * never calibrated, so auto uses the defaults above on every rank of every
 * run: the choice is a function of the message size and the world size,
 * never of timing, and with it the order of every reduction.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_int.h"
#include "rm_check.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"

RM_PARAM(calibrate_reuse, "RINGMASTER_CALIBRATE_REUSE", 1)

#define DEF_ALPHA_US 25.0
#define DEF_BETA_US_PER_B (1.0 / 1000.0)  /* 1 GB/s */
#define DEF_GAMMA_US_PER_B (1.0 / 4000.0) /* 4 GB/s */
#define HD_BW 1.25
#define SHM_GAIN 4.0
#define CAL_SMALL_ITERS 16
#define CAL_BIG_ITERS 8
#define CAL_BARRIER_TAG ((uint64_t)1 << 40)
#define CAL_BIG_BYTES (256u * 1024u)

static void model_of(const rm_comm_t *c, double *a, double *b, double *g)
{
  if (c->cost.calibrated) {
    *a = c->cost.alpha_us;
    *b = c->cost.beta_us_per_byte;
    *g = c->cost.gamma_us_per_byte;
  } else {
    *a = DEF_ALPHA_US;
    *b = DEF_BETA_US_PER_B;
    *g = DEF_GAMMA_US_PER_B;
  }
}

double rm__allreduce_predict(const rm_comm_t *c, rm_algo_t algo, size_t bytes)
{
  double a, b, g, n = (double)bytes;
  int N = rm_comm_world(c), p = rm__pow2_floor(N), lp = 0, d = 0;
  model_of(c, &a, &b, &g);
  if (N <= 1)
    return 0.0;
  while ((1 << lp) < p)
    lp++;
  while ((1 << d) < N)
    d++;
  double fold = N != p ? 2 * a + 2 * n * b + n * g : 0.0;
  double fr = (double)(N - 1) / N, fp = (double)(p - 1) / p;
  switch (algo) {
  case RM_ALGO_RING: return 2 * (N - 1) * a + 2 * fr * n * b + fr * n * g;
  case RM_ALGO_HALVING_DOUBLING:
    return 2 * lp * a + 2 * fp * n * HD_BW * b + fp * n * g + fold;
  case RM_ALGO_BUTTERFLY: return lp * (a + n * b + n * g) + fold;
  case RM_ALGO_TREE: return 2 * d * a + 2 * d * n * b + d * n * g;
  case RM_ALGO_HIERARCHICAL: {
    int H, L;
    if (!rm__hier_shape((rm_comm_t *)c, &H, &L)) return INFINITY;
    /* the model's links are the network's; shared memory inside a host is
     * taken as SHM_GAIN times cheaper in latency and per byte (measured
     * 3-6x on loopback, bench/compare.sh) */
    double fl = (double)(L - 1) / L, fh = (double)(H - 1) / H, m = n / L;
    return 2 * (L - 1) * a / SHM_GAIN + 2 * fl * n * b / SHM_GAIN + fl * n * g +
           2 * (H - 1) * a + 2 * fh * m * b + fh * m * g;
  }
  default: return INFINITY;
  }
}

rm_algo_t rm_allreduce_choose(const rm_comm_t *comm, size_t bytes,
                              double *predicted_us)
{
  rm_algo_t best = RM_ALGO_RING;
  double best_us = INFINITY;
  if (comm == NULL)
    return RM_ALGO_RING;
  for (int a = RM_ALGO_RING; a < RM_ALGO_COUNT; a++) {
    double us = rm__allreduce_predict(comm, (rm_algo_t)a, bytes);
    if (us < best_us) {
      best_us = us;
      best = (rm_algo_t)a;
    }
  }
  if (predicted_us)
    *predicted_us = best_us;
  return best;
}

static int cmp_double(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Dissemination barrier inside the calibration (no new collective
 * sequence number; tags apart from the exchanges'). */
static rm_status_t cal_barrier(rm_comm_t *c)
{
  int n = rm_comm_world(c), r = rm_comm_rank(c);
  char token = 1, got = 0;
  for (int k = 1; k < n; k *= 2)
    RM_CHECK(rm__sendrecv(c, (r + k) % n, &token, 1, CAL_BARRIER_TAG + (uint64_t)k,
                          (r - k + n) % n, &got, 1, CAL_BARRIER_TAG + (uint64_t)k));
  return RM_OK;
}

/* Median microseconds of `iters` ring-neighbour exchanges of len bytes,
 * each started together by a barrier: without it ranks drift apart and a
 * rank finds its neighbour's message already waiting, which measured alpha
 * at 14 us where a 4-rank exchange on 2 cores really costs ~70 us. */
static rm_status_t ring_exchange_us(rm_comm_t *c, char *sbuf, char *rbuf,
                                    size_t len, int iters, double *us)
{
  int n = rm_comm_world(c), r = rm_comm_rank(c);
  double t[CAL_SMALL_ITERS];
  for (int i = 0; i < iters; i++) {
    RM_CHECK(cal_barrier(c));
    int64_t t0 = rm__now_ns();
    RM_CHECK(rm__sendrecv(c, (r + 1) % n, sbuf, len, (uint64_t)i,
                          (r + n - 1) % n, rbuf, len, (uint64_t)i));
    t[i] = (double)(rm__now_ns() - t0) / 1e3;
  }
  qsort(t, (size_t)iters, sizeof t[0], cmp_double);
  *us = t[iters / 2];
  return RM_OK;
}

static double gamma_measure(char *a, const char *b)
{
  rm__reduce_fn_t fn = rm__reduce_fn(RM_F32, RM_SUM);
  double best = INFINITY;
  for (int i = 0; i < 3; i++) {
    int64_t t0 = rm__now_ns();
    fn(a, b, CAL_BIG_BYTES / 4);
    double us = (double)(rm__now_ns() - t0) / 1e3;
    best = us < best ? us : best;
  }
  return best / CAL_BIG_BYTES;
}

/* REUSE: the process's last model, its job and transport set. */
static struct {
  pthread_mutex_t mu;
  int have;
  uint64_t job;
  unsigned tps;
  double m[3];
} g_model = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, {0, 0, 0}};

/* The set of transports c's pairs use, one bit per transport id. */
static unsigned tp_set(const rm_comm_t *c)
{
  unsigned set = 0;
  for (int p = 0; p < rm_comm_world(c); p++) {
    const rm__transport_ops_t *t = p == rm_comm_rank(c) ? NULL : rm__conn_type(c, p);
    if (t) set |= 1u << ((unsigned)t->id & 31u);
  }
  return set;
}

static void model_keep(const rm_comm_t *c, const double m[3])
{
  pthread_mutex_lock(&g_model.mu);
  g_model.have = 1;
  g_model.job = c->job_id;
  g_model.tps = tp_set(c);
  memcpy(g_model.m, m, sizeof g_model.m);
  pthread_mutex_unlock(&g_model.mu);
}

/* REUSE: rank 0's word and model to every rank; 1 when they were taken. */
static rm_status_t model_reused(rm_comm_t *c, int *taken)
{
  double h[4] = {0, 0, 0, 0};
  *taken = 0;
  if (rm_comm_rank(c) == 0 && rm__param_calibrate_reuse()) {
    pthread_mutex_lock(&g_model.mu);
    if (g_model.have && c->job_id && g_model.job == c->job_id && g_model.tps == tp_set(c)) {
      h[0] = 1;
      memcpy(h + 1, g_model.m, sizeof g_model.m);
    }
    pthread_mutex_unlock(&g_model.mu);
  }
  RM_CHECK(rm__tree_bcast(c, h, 4, sizeof(double), 0));
  if (h[0] != 1) return RM_OK;
  c->cost.alpha_us = h[1];
  c->cost.beta_us_per_byte = h[2];
  c->cost.gamma_us_per_byte = h[3];
  c->cost.calibrated = 1;
  model_keep(c, h + 1); /* a replacement holds it from now on */
  *taken = 1;
  RM_DEBUG("cost model of an earlier communicator of job %llu reused: alpha %.1f us, "
           "beta %.3f GB/s, gamma %.3f GB/s", (unsigned long long)c->job_id, h[1],
           1e-3 / h[2], 1e-3 / h[3]);
  return RM_OK;
}

rm_status_t rm__cost_calibrate(rm_comm_t *c)
{
  rm_status_t st = RM_OK;
  double small_us, big_us, m[3];
  int taken = 0;
  if (rm_comm_world(c) > 1) {
    RM_CHECK(model_reused(c, &taken));
    if (taken) return RM_OK;
  }
  char *buf = calloc(2, CAL_BIG_BYTES);
  if (!buf)
    return RM_ERR_NOMEM;
  if (rm_comm_world(c) > 1) {
    RM_CHECK_GOTO(ring_exchange_us(c, buf, buf + CAL_BIG_BYTES, 8, 1, &small_us), st, out);
    RM_CHECK_GOTO(ring_exchange_us(c, buf, buf + CAL_BIG_BYTES, 8, CAL_SMALL_ITERS,
                                   &small_us), st, out);
    RM_CHECK_GOTO(ring_exchange_us(c, buf, buf + CAL_BIG_BYTES, CAL_BIG_BYTES,
                                   CAL_BIG_ITERS, &big_us), st, out);
  } else {
    small_us = DEF_ALPHA_US;
    big_us = DEF_ALPHA_US + CAL_BIG_BYTES * DEF_BETA_US_PER_B;
  }
  m[0] = small_us;
  m[1] = (big_us - small_us) / CAL_BIG_BYTES;
  if (m[1] < 1e-6) /* faster than 1 TB/s is a measuring error */
    m[1] = 1e-6;
  m[2] = gamma_measure(buf, buf + CAL_BIG_BYTES);
  if (rm_comm_world(c) > 1) /* everybody uses rank 0's numbers */
    RM_CHECK_GOTO(rm__tree_bcast(c, m, 3, sizeof(double), 0), st, out);
  c->cost.alpha_us = m[0];
  c->cost.beta_us_per_byte = m[1];
  c->cost.gamma_us_per_byte = m[2];
  c->cost.calibrated = 1;
  model_keep(c, m);
  RM_DEBUG("cost model calibrated: alpha %.1f us, beta %.3f GB/s, gamma %.3f GB/s",
           m[0], 1e-3 / m[1], 1e-3 / m[2]);
out:
  free(buf);
  return st;
}

/* Resolve `algo` for one call (see precedence above); calibrates on first
 * use of auto. *predicted_us: the model's time for the one chosen. */
rm_status_t rm__allreduce_resolve(rm_comm_t *c, rm_algo_t algo, size_t bytes,
                                  rm_algo_t *out, double *predicted_us)
{
  rm_algo_t a = algo != RM_ALGO_AUTO ? algo : c->algorithm;
  double pred[RM_ALGO_COUNT] = {0};
  /* nccl here means a call that does not run on NCCL (host buffers, NCCL
   * off): ringmaster's choice instead */
  if (a == RM_ALGO_NCCL) a = RM_ALGO_AUTO;
  if (a == RM_ALGO_AUTO && !c->cost.calibrated && !c->cost.fixed && rm_comm_world(c) > 1)
    RM_CHECK(rm__cost_calibrate(c));
  if (a == RM_ALGO_AUTO)
    a = rm_allreduce_choose(c, bytes, NULL);
  if (a == RM_ALGO_HIERARCHICAL) {
    int H, L;
    if (!rm__hier_shape(c, &H, &L)) a = RM_ALGO_RING; /* one host, or uneven */
  }
  for (int k = RM_ALGO_RING; k < RM_ALGO_COUNT; k++)
    pred[k] = rm__allreduce_predict(c, (rm_algo_t)k, bytes);
  RM_DEBUG("allreduce %zu bytes, world %d: %s%s (predicted us: ring %.1f, hd %.1f, "
           "butterfly %.1f, tree %.1f, hierarchical %.1f)", bytes, rm_comm_world(c),
           rm_algo_name(a),
           algo == RM_ALGO_AUTO && c->algorithm == RM_ALGO_AUTO ? " by auto" : "",
           pred[RM_ALGO_RING], pred[RM_ALGO_HALVING_DOUBLING],
           pred[RM_ALGO_BUTTERFLY], pred[RM_ALGO_TREE], pred[RM_ALGO_HIERARCHICAL]);
  *out = a;
  *predicted_us = pred[a];
  return RM_OK;
}
