/*
 * test_coll.c - the collectives matrix, in real processes (one per rank).
 *
 *   test_coll WORLD allreduce   every algorithm (ring, hd, butterfly, tree,
 *                               auto) x counts {0, 1, 7, 1000} x every op x
 *                               every dtype x {in place, out of place}; plus
 *                               count 2^20+3 for every algorithm x dtype with
 *                               the op and placement rotating (35 cases), to
 *                               keep a 9-rank world within a minute on 2 cores
 *   test_coll WORLD others      reduce_scatter, allgather, broadcast (every
 *                               root), reduce (every root), alltoall, barrier;
 *                               argument errors leave the communicator usable;
 *                               the algorithm choice is the same on every rank
 *   test_coll 2 large           one in-place f32 sum of 256 MiB per rank
 *
 * Device buffers (RINGMASTER_TEST_DEVICE=1): the same suites with every
 * collective's buffers in device memory (tests/lib/rm_testdev.h: the CUDA
 * runtime on a GPU machine, the stand-in GPU with RINGMASTER_TEST_GPU=
 * standin). Inputs are put into device buffers before each call and the
 * results (and the send buffers, which must come back untouched) got back
 * after it, then checked by the same code; exits 77 when no GPU runtime is
 * usable. The argument checks and t_choice stay on host memory, so a
 * communicator serves host and device calls one after the other.
 *
 * Every suite first checks that each pair got the expected transport
 * (check_transports). CTest runs the matrix three ways: over shared memory
 * (the default between ranks of one host), over TCP
 * (RINGMASTER_TRANSPORTS=tcp) and mixed (RINGMASTER_TEST_HOSTS=2: two
 * simulated hosts, shared memory inside each, TCP across).
 *
 * Inputs are small integers chosen per (op, dtype) so every result is exact
 * in every order of reduction (nccl-tests style): sums stay below 2^24 (f32),
 * 2048 (f16), 256 (bf16, u8); products are of values in {1, 2} (and -1 for
 * signed types) with at most three 2s; min/max over a spread pattern. The
 * reference is computed in double from every rank's inputs and rounded once
 * to the dtype; avg on integers truncates toward zero (C division of the
 * exact sum), on floats it is the sum divided once. Results are compared
 * element by element; the first mismatch is printed with its indexes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_testdev.h"  /* tests/lib: device buffers */
#include "rm_testlib.h" /* tests/lib: one process per rank */
#include "ringmaster/ringmaster.h"

/* ---- device mode: host buffers mirrored by device buffers ---- */
static int g_dev; /* RINGMASTER_TEST_DEVICE=1 */

#define NSHADOW 16
static struct { const void *host; void *dev; size_t cap; } g_shadow[NSHADOW];

/* The device twin of host buffer h (at least n bytes), with h's first n
 * bytes put into it. NULL stays NULL. */
static void *shadow(const void *h, size_t n)
{
  int i, free_i = -1;
  if (h == NULL) return NULL;
  for (i = 0; i < NSHADOW; i++) {
    if (g_shadow[i].host == h) break;
    if (g_shadow[i].host == NULL && free_i < 0) free_i = i;
  }
  if (i == NSHADOW) {
    if (free_i < 0) { fprintf(stderr, "test_coll: too many device twins\n"); exit(3); }
    i = free_i;
    g_shadow[i].host = h;
  }
  if (g_shadow[i].cap < n || g_shadow[i].dev == NULL) {
    rm_test_dev_free(g_shadow[i].dev);
    g_shadow[i].dev = rm_test_dev_alloc(n ? n : 1);
    g_shadow[i].cap = n ? n : 1;
    if (g_shadow[i].dev == NULL) exit(3);
  }
  if (rm_test_dev_put(g_shadow[i].dev, h, n) != 0) exit(3);
  return g_shadow[i].dev;
}

/* Bring n bytes of h's twin back into h. */
static void unshadow(void *h, const void *d, size_t n)
{
  if (h != NULL && d != NULL && rm_test_dev_get(h, d, n) != 0) exit(3);
}

static void shadow_forget(const void *h)
{
  for (int i = 0; i < NSHADOW; i++)
    if (g_shadow[i].host == h) {
      rm_test_dev_free(g_shadow[i].dev);
      g_shadow[i].host = NULL;
      g_shadow[i].dev = NULL;
      g_shadow[i].cap = 0;
    }
}

static void xfree(void *p)
{
  if (g_dev) shadow_forget(p);
  free(p);
}

static rm_status_t d_allreduce_ex(rm_comm_t *c, const void *s, void *r, size_t count,
                                  rm_dtype_t dt, rm_op_t op, rm_algo_t a, rm_allreduce_info_t *info)
{
  size_t n = count * rm_dtype_size(dt);
  if (!g_dev) return rm_allreduce_ex(c, s, r, count, dt, op, a, info);
  void *ds = shadow(s, n), *dr = r == s ? ds : shadow(r, n);
  rm_status_t st = rm_allreduce_ex(c, ds, dr, count, dt, op, a, info);
  unshadow(r, dr, n);
  if (r != s) unshadow((void *)s, ds, n);
  return st;
}

static rm_status_t d_reduce_scatter(rm_comm_t *c, const void *s, void *r, size_t rc,
                                    rm_dtype_t dt, rm_op_t op)
{
  size_t n = rc * rm_dtype_size(dt), w = (size_t)rm_comm_world(c);
  if (!g_dev) return rm_reduce_scatter(c, s, r, rc, dt, op);
  void *ds = shadow(s, n * w), *dr = shadow(r, n);
  rm_status_t st = rm_reduce_scatter(c, ds, dr, rc, dt, op);
  unshadow(r, dr, n);
  return st;
}

static rm_status_t d_allgather(rm_comm_t *c, const void *s, void *r, size_t sc, rm_dtype_t dt)
{
  size_t n = sc * rm_dtype_size(dt), w = (size_t)rm_comm_world(c);
  if (!g_dev) return rm_allgather(c, s, r, sc, dt);
  void *ds = shadow(s, n), *dr = shadow(r, n * w);
  rm_status_t st = rm_allgather(c, ds, dr, sc, dt);
  unshadow(r, dr, n * w);
  return st;
}

static rm_status_t d_broadcast(rm_comm_t *c, void *b, size_t count, rm_dtype_t dt, int root)
{
  size_t n = count * rm_dtype_size(dt);
  if (!g_dev) return rm_broadcast(c, b, count, dt, root);
  void *db = shadow(b, n);
  rm_status_t st = rm_broadcast(c, db, count, dt, root);
  unshadow(b, db, n);
  return st;
}

static rm_status_t d_reduce(rm_comm_t *c, const void *s, void *r, size_t count, rm_dtype_t dt,
                            rm_op_t op, int root)
{
  size_t n = count * rm_dtype_size(dt);
  if (!g_dev) return rm_reduce(c, s, r, count, dt, op, root);
  void *ds = shadow(s, n), *dr = shadow(r, n);
  rm_status_t st = rm_reduce(c, ds, dr, count, dt, op, root);
  unshadow(r, dr, n);
  return st;
}

static rm_status_t d_alltoall(rm_comm_t *c, const void *s, void *r, size_t count, rm_dtype_t dt)
{
  size_t n = count * rm_dtype_size(dt) * (size_t)rm_comm_world(c);
  if (!g_dev) return rm_alltoall(c, s, r, count, dt);
  void *ds = shadow(s, n), *dr = shadow(r, n);
  rm_status_t st = rm_alltoall(c, ds, dr, count, dt);
  unshadow(r, dr, n);
  return st;
}

static size_t esize(rm_dtype_t dt) { return rm_dtype_size(dt); }

/* Whether hierarchical applies to a world of n ranks here: RINGMASTER_TEST_
 * HOSTS=K simulated hosts of equal size >= 2 (and shared memory offered). */
static int hier_applies(int n)
{
  const char *only = getenv("RINGMASTER_TRANSPORTS"), *k = getenv("RINGMASTER_TEST_HOSTS");
  int hosts = k ? atoi(k) : 0;
  if (only && strcmp(only, "tcp") == 0) return 0;
  return hosts >= 2 && n % hosts == 0 && n / hosts >= 2;
}

static int is_signed(rm_dtype_t dt) { return dt != RM_U8; }

/* Input of rank r at element i for op (see the header comment). */
static int64_t in_val(rm_op_t op, rm_dtype_t dt, int r, size_t i)
{
  switch (op) {
  case RM_SUM:
  case RM_AVG:
    switch (dt) {
    case RM_F16: return (int64_t)(i % 31) + r - 4;
    case RM_BF16: return (int64_t)(i % 13) + r % 3 - 3;
    case RM_U8: return (int64_t)(i % 13) + r;
    default: return (int64_t)(i % 1021 + 1) * (r + 1) - (int64_t)(i % 3) * 50;
    }
  case RM_PROD: {
    int64_t v = (i + (size_t)r) % 3 == 0 ? 2 : 1;
    return is_signed(dt) && (i * 7 + (size_t)r) % 11 == 0 ? -v : v;
  }
  default:
    return (int64_t)((i * 13 + (size_t)r * 7) % 29) - (dt == RM_U8 ? 0 : 10);
  }
}

/* Round-to-nearest-even of a double into a binary16-like format. */
static uint16_t ref_round(double x, int mbits, int ebits)
{
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias, e;
  uint16_t sign = signbit(x) ? (uint16_t)(1u << (mbits + ebits)) : 0;
  uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
  double a = fabs(x);
  (void)frexp(a, &e);
  e -= 1;
  if (a == 0 || e < emin) e = emin;
  double q = rint(ldexp(a, mbits - e));
  if (q >= ldexp(1.0, mbits + 1)) { q /= 2; e++; }
  if (e > bias) return sign | inf;
  if (q < ldexp(1.0, mbits)) return sign | (uint16_t)q;
  return sign | (uint16_t)(((unsigned)(e + bias) << mbits) | ((unsigned)q - (1u << mbits)));
}

static void put(void *b, size_t i, rm_dtype_t dt, double v)
{
  switch (dt) {
  case RM_F32: ((float *)b)[i] = (float)v; break;
  case RM_F64: ((double *)b)[i] = v; break;
  case RM_F16: ((uint16_t *)b)[i] = ref_round(v, 10, 5); break;
  case RM_BF16: ((uint16_t *)b)[i] = ref_round(v, 7, 8); break;
  case RM_I32: ((int32_t *)b)[i] = (int32_t)v; break;
  case RM_I64: ((int64_t *)b)[i] = (int64_t)v; break;
  default: ((uint8_t *)b)[i] = (uint8_t)v; break;
  }
}

/* in_val(op, dt, r, i) is periodic in i with this period (the lcm of the
 * moduli it uses), so inputs and references are computed for one period
 * and tiled: the reference of a 2^20-element case costs P * n, not
 * count * n, which kept the 9-rank matrices at tens of seconds each. */
static size_t period(rm_op_t op, rm_dtype_t dt)
{
  switch (op) {
  case RM_SUM:
  case RM_AVG:
    return dt == RM_F16 ? 31 : dt == RM_BF16 || dt == RM_U8 ? 13 : 1021 * 3;
  case RM_PROD: return 3 * 11;
  default: return 29;
  }
}

#define MAX_PERIOD (1021 * 3)

/* Copy period-long pattern pat (elements of size es) over b[0..count). */
static void tile(void *b, const unsigned char *pat, size_t p, size_t es, size_t count)
{
  for (size_t i = 0; i < count; i += p)
    memcpy((char *)b + i * es, pat, (count - i < p ? count - i : p) * es);
}

static void fill(void *b, size_t count, rm_op_t op, rm_dtype_t dt, int r)
{
  static unsigned char pat[MAX_PERIOD * 8];
  size_t p = period(op, dt);
  for (size_t i = 0; i < p && i < count; i++)
    put(pat, i, dt, (double)in_val(op, dt, r, i));
  tile(b, pat, p, esize(dt), count);
}

/* Reference result of global element i over n ranks, rounded once, stored
 * at out[0]. */
static void expect_at(void *out, size_t i, rm_op_t op, rm_dtype_t dt, int n)
{
  double acc = (double)in_val(op, dt, 0, i);
  for (int r = 1; r < n; r++) {
    double v = (double)in_val(op, dt, r, i);
    if (op == RM_SUM || op == RM_AVG) acc += v;
    else if (op == RM_PROD) acc *= v;
    else if (op == RM_MIN) acc = v < acc ? v : acc;
    else acc = v > acc ? v : acc;
  }
  if (op == RM_AVG) {
    if (dt == RM_F32) acc = (double)((float)acc / (float)n);
    else if (dt == RM_F64 || dt == RM_F16 || dt == RM_BF16) acc = acc / n;
    else acc = (double)((int64_t)acc / n); /* truncates toward zero */
  }
  put(out, 0, dt, acc);
}

static double get(const void *b, size_t i, rm_dtype_t dt)
{
  switch (dt) {
  case RM_F32: return ((const float *)b)[i];
  case RM_F64: return ((const double *)b)[i];
  case RM_F16: case RM_BF16: return (double)((const uint16_t *)b)[i]; /* bits */
  case RM_I32: return ((const int32_t *)b)[i];
  case RM_I64: return (double)((const int64_t *)b)[i];
  default: return ((const uint8_t *)b)[i];
  }
}

/* Compare got[0..count) with the reference for global elements base + i;
 * print the first mismatch. Returns 1 on mismatch. */
static int verify(const char *what, int rank, const void *got, size_t count,
                  rm_op_t op, rm_dtype_t dt, int n, size_t base)
{
  static unsigned char refs[MAX_PERIOD * 8];
  size_t es = esize(dt), p = period(op, dt);
  for (size_t j = 0; j < p; j++) /* refs[j]: global elements = j mod p */
    expect_at(refs + ((base + j) % p) * es, base + j, op, dt, n);
  for (size_t i = 0; i < count; i++) {
    const unsigned char *ref = refs + ((base + i) % p) * es;
    if (memcmp(ref, (const char *)got + i * es, es) != 0) {
      fprintf(stderr, "rank %d: %s: MISMATCH at element %zu (global %zu) of %zu: "
              "got %.17g want %.17g (%s) op %s dtype %s world %d\n", rank, what, i,
              base + i, count, get(got, i, dt), get(ref, 0, dt),
              dt == RM_F16 || dt == RM_BF16 ? "bit patterns" : "values",
              rm_op_name(op), rm_dtype_name(dt), n);
      return 1;
    }
  }
  return 0;
}

static int check_st(int rank, const char *what, rm_status_t st, rm_comm_t *c)
{
  if (st == RM_OK) return 0;
  fprintf(stderr, "rank %d: %s -> %s (%s)\n", rank, what, rm_status_name(st),
          rm_comm_last_error(c));
  return 1;
}

/* One all-reduce case; returns failures (a transport error is fatal: -1). */
static int one_allreduce(rm_comm_t *c, rm_algo_t algo, size_t count, rm_op_t op,
                         rm_dtype_t dt, int inplace, char *a, char *b)
{
  int r = rm_comm_rank(c), n = rm_comm_world(c);
  char what[128];
  rm_allreduce_info_t info;
  rm_status_t st;
  snprintf(what, sizeof what, "allreduce algo %s count %zu %s", rm_algo_name(algo),
           count, inplace ? "in place" : "out of place");
  fill(a, count, op, dt, r);
  if (!inplace)
    memset(b, 0xA5, count * esize(dt));
  st = d_allreduce_ex(c, a, inplace ? a : b, count, dt, op, algo, &info);
  if (check_st(r, what, st, c))
    return -1;
  /* hierarchical runs (and reports) the ring where the ranks are not H
   * hosts of L >= 2 ranks each */
  rm_algo_t want = algo == RM_ALGO_HIERARCHICAL && !hier_applies(n) ? RM_ALGO_RING : algo;
  if (algo != RM_ALGO_AUTO && n > 1 && count > 0 && info.algorithm != want) {
    fprintf(stderr, "rank %d: %s: ran %s\n", r, what, rm_algo_name(info.algorithm));
    return 1;
  }
  int bad = verify(what, r, inplace ? a : b, count, op, dt, n, 0);
  if (!inplace) { /* the input must be untouched */
    char *x = malloc(count * esize(dt) + 1);
    fill(x, count, op, dt, r);
    if (memcmp(x, a, count * esize(dt)) != 0) {
      fprintf(stderr, "rank %d: %s: send buffer modified\n", r, what);
      bad = 1;
    }
    free(x);
  }
  return bad;
}

static const rm_algo_t g_algos[] = {RM_ALGO_RING, RM_ALGO_HALVING_DOUBLING,
                                    RM_ALGO_BUTTERFLY, RM_ALGO_TREE,
                                    RM_ALGO_HIERARCHICAL, RM_ALGO_AUTO};
#define NALGOS 5
#define BIG_COUNT ((size_t)(1u << 20) + 3)

/* Every pair got the transport the environment asks for: TCP under
 * RINGMASTER_TRANSPORTS=tcp, RDMA when the list starts with rdma (the
 * emulated device of tests/rdma_emu), else shared memory between ranks of
 * one (simulated, RINGMASTER_TEST_HOSTS) host and TCP across hosts. */
static int check_transports(rm_comm_t *c)
{
  const char *only = getenv("RINGMASTER_TRANSPORTS"), *k = getenv("RINGMASTER_TEST_HOSTS");
  int hosts = k ? atoi(k) : 0, n = rm_comm_world(c), r = rm_comm_rank(c), bad = 0;
  int tcp_only = only && strcmp(only, "tcp") == 0;
  int rdma_first = only && strncmp(only, "rdma", 4) == 0;
  for (int p = 0; p < n; p++) {
    if (p == r) continue;
    int same = hosts < 1 || r * hosts / n == p * hosts / n;
    const char *want = rdma_first ? "rdma" : tcp_only || !same ? "tcp" : "shm";
    const char *got = rm_comm_transport(c, p);
    if (got == NULL || strcmp(got, want) != 0) {
      fprintf(stderr, "rank %d: pair with rank %d carried by %s, expected %s\n", r, p,
              got ? got : "(none)", want);
      bad++;
    }
  }
  return bad;
}

static int suite_allreduce(rm_comm_t *c, void *arg)
{
  static const size_t counts[] = {0, 1, 7, 1000};
  char *a = malloc(BIG_COUNT * 8), *b = malloc(BIG_COUNT * 8);
  int fails = check_transports(c), cases = 0, rc = 0;
  (void)arg;
  /* TEST_COLL_BIG_ONLY=1: only the 2^20+3 cases (debugging aid) */
  for (int ai = getenv("TEST_COLL_BIG_ONLY") ? NALGOS : 0; ai < NALGOS; ai++)
    for (int ci = 0; ci < 4; ci++)
      for (int op = 0; op < RM_OP_COUNT; op++)
        for (int dt = 0; dt < RM_DTYPE_COUNT; dt++)
          for (int ip = 0; ip < 2; ip++) {
            rc = one_allreduce(c, g_algos[ai], counts[ci], (rm_op_t)op, (rm_dtype_t)dt,
                               ip, a, b);
            if (rc < 0) goto out;
            fails += rc;
            cases++;
          }
  for (int ai = 0; ai < NALGOS; ai++)
    for (int dt = 0; dt < RM_DTYPE_COUNT; dt++) {
      if (getenv("TEST_COLL_ALGO") && strcmp(getenv("TEST_COLL_ALGO"), rm_algo_name(g_algos[ai])))
        continue;
      if (getenv("TEST_COLL_DT") && atoi(getenv("TEST_COLL_DT")) != dt)
        continue;
      rc = one_allreduce(c, g_algos[ai], BIG_COUNT, (rm_op_t)((ai + dt) % RM_OP_COUNT),
                         (rm_dtype_t)dt, (ai + dt) % 2, a, b);
      if (rc < 0) goto out;
      fails += rc;
      cases++;
    }
out:
  if (rm_comm_rank(c) == 0)
    printf("world %d: %d all-reduce cases, %d wrong%s\n", rm_comm_world(c), cases,
           fails, rc < 0 ? ", stopped by an error" : "");
  xfree(a);
  xfree(b);
  return fails || rc < 0 ? 1 : 0;
}

static int t_reduce_scatter(rm_comm_t *c)
{
  static const size_t counts[] = {0, 1, 7, 1000};
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  char *in = malloc(1000 * (size_t)n * 8), *out = malloc(1000 * 8);
  for (int ci = 0; ci < 4; ci++)
    for (int dt = 0; dt < RM_DTYPE_COUNT; dt++)
      for (int op = 0; op < RM_OP_COUNT; op++) {
        size_t rc = counts[ci];
        if (op != RM_SUM && dt != RM_F32 && dt != RM_I32) continue;
        fill(in, rc * (size_t)n, (rm_op_t)op, (rm_dtype_t)dt, r);
        rm_status_t st = d_reduce_scatter(c, in, out, rc, (rm_dtype_t)dt, (rm_op_t)op);
        if (check_st(r, "reduce_scatter", st, c)) { bad++; goto out; }
        bad += verify("reduce_scatter", r, out, rc, (rm_op_t)op, (rm_dtype_t)dt, n,
                      (size_t)r * rc);
      }
out:
  xfree(in);
  xfree(out);
  return bad;
}

static int t_allgather(rm_comm_t *c)
{
  static const size_t counts[] = {0, 1, 7, 1000, 100003};
  static const rm_dtype_t dts[] = {RM_U8, RM_F64, RM_F16};
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  char *in = malloc(100003 * 8), *out = malloc(100003 * 8 * (size_t)n), *want = malloc(100003 * 8);
  for (int ci = 0; ci < 5; ci++)
    for (int d = 0; d < 3; d++) {
      size_t cnt = counts[ci], es = esize(dts[d]);
      fill(in, cnt, RM_MAX, dts[d], r);
      memset(out, 0xA5, cnt * es * (size_t)n);
      rm_status_t st = d_allgather(c, in, out, cnt, dts[d]);
      if (check_st(r, "allgather", st, c)) { bad++; goto out; }
      for (int q = 0; q < n && !bad; q++) {
        fill(want, cnt, RM_MAX, dts[d], q);
        if (memcmp(want, out + (size_t)q * cnt * es, cnt * es) != 0) {
          fprintf(stderr, "rank %d: allgather count %zu %s: block %d wrong\n", r, cnt,
                  rm_dtype_name(dts[d]), q);
          bad++;
        }
      }
    }
out:
  xfree(in); xfree(out); free(want);
  return bad;
}

static int t_broadcast(rm_comm_t *c)
{
  static const size_t counts[] = {0, 1, 7, 1000, 300001};
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  char *buf = malloc(300001 * 4), *want = malloc(300001 * 4);
  for (int root = 0; root < n; root++)
    for (int ci = 0; ci < 5; ci++) {
      size_t cnt = counts[ci];
      if (r == root) fill(buf, cnt, RM_MAX, RM_I32, root);
      else memset(buf, 0xA5, cnt * 4);
      rm_status_t st = d_broadcast(c, buf, cnt, RM_I32, root);
      if (check_st(r, "broadcast", st, c)) { bad++; goto out; }
      fill(want, cnt, RM_MAX, RM_I32, root);
      if (memcmp(want, buf, cnt * 4) != 0) {
        fprintf(stderr, "rank %d: broadcast root %d count %zu wrong\n", r, root, cnt);
        bad++;
      }
    }
out:
  xfree(buf); free(want);
  return bad;
}

static int t_reduce(rm_comm_t *c)
{
  static const size_t counts[] = {0, 1, 1000, 300001};
  static const rm_op_t ops[] = {RM_SUM, RM_MAX, RM_AVG};
  static const rm_dtype_t dts[] = {RM_F32, RM_I64, RM_BF16};
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  char *in = malloc(300001 * 8), *out = malloc(300001 * 8);
  for (int root = 0; root < n; root++)
    for (int ci = 0; ci < 4; ci++)
      for (int k = 0; k < 3; k++) {
        size_t cnt = counts[ci];
        rm_op_t op = ops[(root + k) % 3];
        fill(in, cnt, op, dts[k], r);
        rm_status_t st = d_reduce(c, in, r == root ? out : NULL, cnt, dts[k], op, root);
        if (check_st(r, "reduce", st, c)) { bad++; goto out; }
        if (r == root)
          bad += verify("reduce", r, out, cnt, op, dts[k], n, 0);
      }
out:
  xfree(in); xfree(out);
  return bad;
}

static int32_t a2a_val(int from, int to, size_t i)
{
  return (int32_t)(from * 1000000 + to * 1000 + (int)(i % 1000));
}

static int t_alltoall(rm_comm_t *c)
{
  static const size_t counts[] = {0, 1, 7, 1000};
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  int32_t *in = malloc(1000 * 4 * (size_t)n), *out = malloc(1000 * 4 * (size_t)n);
  for (int ci = 0; ci < 4; ci++) {
    size_t cnt = counts[ci];
    for (int j = 0; j < n; j++)
      for (size_t i = 0; i < cnt; i++) in[(size_t)j * cnt + i] = a2a_val(r, j, i);
    rm_status_t st = d_alltoall(c, in, out, cnt, RM_I32);
    if (check_st(r, "alltoall", st, c)) { bad++; break; }
    for (int j = 0; j < n; j++)
      for (size_t i = 0; i < cnt; i++)
        if (out[(size_t)j * cnt + i] != a2a_val(j, r, i)) {
          fprintf(stderr, "rank %d: alltoall count %zu: block %d element %zu: %d\n", r,
                  cnt, j, i, out[(size_t)j * cnt + i]);
          bad++;
          j = n;
          break;
        }
  }
  xfree(in); xfree(out);
  return bad;
}

/* Argument errors: RM_ERR_INVALID_ARG, and the communicator stays usable. */
static int t_args(rm_comm_t *c)
{
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  float x[4] = {1, 2, 3, 4}, y[4];
  struct { rm_status_t got; const char *what; } t[] = {
      {rm_allreduce(NULL, x, x, 4, RM_F32, RM_SUM), "NULL comm"},
      {rm_allreduce(c, NULL, y, 4, RM_F32, RM_SUM), "NULL send"},
      {rm_allreduce(c, x, NULL, 4, RM_F32, RM_SUM), "NULL recv"},
      {rm_allreduce(c, x, y, 4, RM_DTYPE_COUNT, RM_SUM), "bad dtype"},
      {rm_allreduce(c, x, y, 4, RM_F32, RM_OP_COUNT), "bad op"},
      {rm_allreduce_ex(c, x, y, 4, RM_F32, RM_SUM, RM_ALGO_COUNT, NULL), "bad algo"},
      {rm_allreduce(c, x, y, SIZE_MAX / 2, RM_F32, RM_SUM), "size overflow"},
      {rm_broadcast(c, x, 4, RM_F32, n), "root = world"},
      {rm_broadcast(c, x, 4, RM_F32, -1), "root = -1"},
      {rm_reduce(c, x, y, 4, RM_F32, RM_SUM, n), "reduce root"},
      {rm_alltoall(c, x, x, 1, RM_F32), "alltoall in place"},
      {rm_reduce_scatter(c, NULL, y, 1, RM_F32, RM_SUM), "reduce_scatter NULL"},
      {rm_allgather(c, x, NULL, 1, RM_F32), "allgather NULL"},
      {rm_barrier(NULL), "barrier NULL"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (t[i].got != RM_ERR_INVALID_ARG) {
      fprintf(stderr, "rank %d: %s: %s, want RM_ERR_INVALID_ARG\n", r, t[i].what,
              rm_status_name(t[i].got));
      bad++;
    }
  if (rm_comm_status(c) != RM_OK) {
    fprintf(stderr, "rank %d: argument errors failed the communicator\n", r);
    bad++;
  }
  if (check_st(r, "count 0 with NULL buffers",
               rm_allreduce(c, NULL, NULL, 0, RM_F32, RM_SUM), c))
    bad++;
  rm_status_t st = rm_allreduce(c, x, y, 4, RM_F32, RM_SUM);
  if (check_st(r, "allreduce after argument errors", st, c)) return bad + 1;
  for (int i = 0; i < 4; i++)
    if (y[i] != (float)(n * (i + 1))) { bad++; fprintf(stderr, "rank %d: y[%d]=%g\n", r, i, y[i]); break; }
  return bad;
}

/* auto picks the same algorithm on every rank; per-communicator and
 * per-call choices win over auto, in that order. */
static int t_choice(rm_comm_t *c)
{
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  static const size_t sizes[] = {2, 16384, 1u << 20};
  float *buf = calloc(1u << 20, sizeof(float));
  int32_t mine, all[64];
  rm_allreduce_info_t info;
  for (int k = 0; k < 3; k++) {
    if (check_st(r, "auto", rm_allreduce_ex(c, buf, buf, sizes[k], RM_F32, RM_SUM,
                                            RM_ALGO_AUTO, &info), c)) { bad++; goto out; }
    mine = (int32_t)info.algorithm;
    if (check_st(r, "allgather", rm_allgather(c, &mine, all, 1, RM_I32), c)) { bad++; goto out; }
    for (int q = 0; q < n; q++)
      if (all[q] != mine) {
        fprintf(stderr, "rank %d: auto chose %s, rank %d chose %s for %zu elements\n", r,
                rm_algo_name(info.algorithm), q, rm_algo_name((rm_algo_t)all[q]), sizes[k]);
        bad++;
      }
    if (n > 1 && (info.predicted_us <= 0 || info.algorithm == RM_ALGO_AUTO)) {
      fprintf(stderr, "rank %d: info not filled\n", r);
      bad++;
    }
    double pred;
    rm_algo_t ch = rm_allreduce_choose(c, sizes[k] * 4, &pred);
    if (n > 1 && ch != info.algorithm && rm_comm_world(c) > 1 &&
        getenv("RINGMASTER_ALGO") == NULL) {
      fprintf(stderr, "rank %d: rm_allreduce_choose says %s, auto ran %s\n", r,
              rm_algo_name(ch), rm_algo_name(info.algorithm));
      bad++;
    }
  }
  rm_comm_set_algorithm(c, RM_ALGO_TREE);
  rm_allreduce_ex(c, buf, buf, 100, RM_F32, RM_SUM, RM_ALGO_AUTO, &info);
  if (n > 1 && info.algorithm != RM_ALGO_TREE) { bad++; fprintf(stderr, "comm algo ignored\n"); }
  rm_allreduce_ex(c, buf, buf, 100, RM_F32, RM_SUM, RM_ALGO_HALVING_DOUBLING, &info);
  if (n > 1 && info.algorithm != RM_ALGO_HALVING_DOUBLING) { bad++; fprintf(stderr, "call algo ignored\n"); }
  rm_comm_set_algorithm(c, RM_ALGO_AUTO);
out:
  free(buf);
  return bad;
}

static int suite_others(rm_comm_t *c, void *arg)
{
  int bad = check_transports(c), r = rm_comm_rank(c);
  (void)arg;
  bad += t_args(c);
  if (!bad) bad += t_reduce_scatter(c);
  if (!bad) bad += t_allgather(c);
  if (!bad) bad += t_broadcast(c);
  if (!bad) bad += t_reduce(c);
  if (!bad) bad += t_alltoall(c);
  for (int i = 0; i < 3 && !bad; i++)
    bad += check_st(r, "barrier", rm_barrier(c), c);
  if (!bad) bad += t_choice(c);
  if (r == 0)
    printf("world %d: other collectives %s\n", rm_comm_world(c), bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}

/* RINGMASTER_ALGO=butterfly in the environment: auto resolves to it. */
static int suite_env(rm_comm_t *c, void *arg)
{
  float x[64] = {0};
  rm_allreduce_info_t info;
  (void)arg;
  if (check_st(rm_comm_rank(c), "allreduce", rm_allreduce_ex(c, x, x, 64, RM_F32, RM_SUM,
                                                             RM_ALGO_AUTO, &info), c))
    return 1;
  if (info.algorithm != RM_ALGO_BUTTERFLY) {
    fprintf(stderr, "RINGMASTER_ALGO=butterfly ignored: ran %s\n", rm_algo_name(info.algorithm));
    return 1;
  }
  return 0;
}

/* One 256 MiB-per-rank f32 sum, in place; every element checked. */
static int suite_large(rm_comm_t *c, void *arg)
{
  size_t count = (size_t)64 << 20;
  int r = rm_comm_rank(c), bad;
  float *a = malloc(count * sizeof(float));
  (void)arg;
  if (!a) { fprintf(stderr, "rank %d: no memory for 256 MiB\n", r); return 1; }
  fill(a, count, RM_SUM, RM_F32, r);
  rm_status_t st = d_allreduce_ex(c, a, a, count, RM_F32, RM_SUM, RM_ALGO_AUTO, NULL);
  bad = check_st(r, "large allreduce", st, c);
  if (!bad) bad = verify("large allreduce", r, a, count, RM_SUM, RM_F32, rm_comm_world(c), 0);
  if (r == 0) printf("256 MiB all-reduce over %d ranks: %s\n", rm_comm_world(c), bad ? "FAILED" : "ok");
  xfree(a);
  return bad;
}

int main(int argc, char **argv)
{
  int world = argc > 1 ? atoi(argv[1]) : 0;
  const char *suite = argc > 2 ? argv[2] : "allreduce";
  rm_test_fn fn = !strcmp(suite, "allreduce") ? suite_allreduce
                  : !strcmp(suite, "others") ? suite_others
                  : !strcmp(suite, "env") ? suite_env
                  : !strcmp(suite, "large") ? suite_large : NULL;
  if (world < 1 || fn == NULL) {
    fprintf(stderr, "usage: test_coll WORLD allreduce|others|env|large\n");
    return 2;
  }
  g_dev = getenv("RINGMASTER_TEST_DEVICE") && atoi(getenv("RINGMASTER_TEST_DEVICE")) == 1;
  if (g_dev) {
    char why[256];
    if (!rm_test_gpu_available(why, sizeof why)) {
      printf("SKIP: device buffers: %s\n", why);
      return 77;
    }
    printf("device buffers through the %s runtime\n", why);
  }
  int bad = rm_test_run(world, fn, NULL, 600000);
  return bad ? 1 : 0;
}
