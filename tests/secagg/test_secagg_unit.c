/*
 * test_secagg_unit.c - the arithmetic of secure aggregation
 * (worker/secagg/secagg_math.c), no communicator:
 *
 *   1. the default scale is the largest power of two the capacity rule
 *      allows, and rm__secagg_check refuses what the rule or the threshold
 *      forbids, with the documented words;
 *   2. stochastic rounding is unbiased (mean error over 1M draws within 5
 *      standard errors of 0), bounded (|q - v| < 1, |q| <= bound) and
 *      deterministic per (key, seq) but different across seq;
 *   3. the neighbour graph: symmetric, no self loops, ascending, degree k
 *      for every rank, guards = min(threshold, k + 1) positions (at least 2),
 *      vertex connectivity >= k for N = 2..64 (Menger / max-flow from a
 *      fixed vertex, valid because a circulant graph is vertex-transitive;
 *      cross-checked by brute force over every (k-1)-cut for N <= 12);
 *   4. seeds: both ends of an edge derive the same s_uv; a low-order point
 *      is refused; masks over the full membership cancel (sum of every
 *      rank's pairwise mask = 0 mod 2^bits; with self-masks the sum is the
 *      sum of the self-masks), at offset 0 and at a block-aligned offset;
 *      a stream started at `first` equals the tail of one started at 0;
 *   5. rm__secagg_keystream (AVX-512F where the CPU has it) writes exactly
 *      libsodium's ChaCha20-IETF keystream, for lengths around the 16-block
 *      groups and the libsodium tail, at several block counters (the
 *      vector path's counter lanes cross 2^8, 2^16 and carry into its
 *      high words).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "rm_testcheck.h"
#include "secagg/secagg.h"
#include "secagg/secagg_int.h"

#define MAXN 64

static void test_params(void)
{
  char why[256];
  double s = rm__secagg_default_scale(32, 1.0, 9);
  /* 9 (s + 1) <= 2^30 -> s <= 119304646: 2^26 */
  CHECKF(s == 67108864.0, "default scale %g", s);
  for (int bits = 32; bits <= 64; bits += 32)
    for (int w = 2; w <= 1000; w = w * 3 + 1)
      for (double clip = 0.01; clip < 1e6; clip *= 17) {
        double d = rm__secagg_default_scale(bits, clip, w), cap = ldexp(1.0, bits - 2);
        int e;
        CHECKF(d > 0 && frexp(d, &e) == 0.5, "bits %d clip %g world %d: %g", bits, clip, w, d);
        CHECKF(w * (clip * d + 1) <= cap && w * (clip * 2 * d + 1) > cap,
               "bits %d clip %g world %d: %g not the largest", bits, clip, w, d);
      }
  rm__secagg_params_t p = {.bits = 32, .clip = 1, .threshold = 2, .job_id = 1, .generation = 1};
  CHECK(rm__secagg_check(&p, 9, why, sizeof why) == RM_OK);
  p.scale = ldexp(1.0, 31);
  CHECK(rm__secagg_check(&p, 9, why, sizeof why) == RM_ERR_INVALID_ARG);
  CHECKF(!strcmp(why, "32 bits cannot hold 9 x (clip 1 x scale 2^31 + 1)"), "%s", why);
  p.scale = 0;
  p.threshold = 3;
  CHECK(rm__secagg_check(&p, 2, why, sizeof why) == RM_ERR_INVALID_ARG);
  CHECKF(!strcmp(why, "secure aggregation: 2 members, threshold 3: refusing to reveal a sum "
                      "over fewer inputs"), "%s", why);
  p.threshold = 1;
  CHECK(rm__secagg_check(&p, 4, why, sizeof why) == RM_ERR_INVALID_ARG);
  p.threshold = 2;
  p.bits = 16;
  CHECK(rm__secagg_check(&p, 4, why, sizeof why) == RM_ERR_INVALID_ARG);
  p.bits = 64;
  CHECK(rm__secagg_check(&p, 4, why, sizeof why) == RM_OK);
  p.clip = 0;
  CHECK(rm__secagg_check(&p, 4, why, sizeof why) == RM_ERR_INVALID_ARG);
  p.clip = NAN;
  CHECK(rm__secagg_check(&p, 4, why, sizeof why) == RM_ERR_INVALID_ARG);
  p.clip = 1;
  p.scale = -1;
  CHECK(rm__secagg_check(&p, 4, why, sizeof why) == RM_ERR_INVALID_ARG);
}

static void test_rounding(void)
{
  enum { N = 1 << 20 };
  float *x = malloc(N * sizeof *x);
  int32_t *q = malloc(N * sizeof *q), *q2 = malloc(N * sizeof *q2);
  uint8_t key[32];
  randombytes_buf(key, sizeof key);
  /* one value with a fractional part of 0.3 (in quanta), then mixed values */
  for (int pass = 0; pass < 2; pass++) {
    double var = 0, err = 0, scale = 4.0;
    for (int i = 0; i < N; i++)
      x[i] = pass == 0 ? 1.325f /* 5.3 quanta */ : (float)((i % 2001) - 1000) / 777.0f;
    rm__secagg_quantize(32, x, N, 1.0, scale, 1e9, key, (uint64_t)pass, 0, q);
    int bad = 0;
    for (int i = 0; i < N; i++) {
      double v = (double)x[i] * scale, f = v - floor(v), e = q[i] - v;
      bad += !(fabs(e) < 1);
      err += e;
      var += f * (1 - f); /* variance of one rounding */
    }
    CHECKF(bad == 0, "pass %d: %d roundings off by >= 1 quantum", pass, bad);
    double mean = err / N, se = sqrt(var) / N;
    CHECKF(fabs(mean) < 5 * se + 1e-9, "pass %d: mean rounding error %g, standard error %g",
           pass, mean, se);
  }
  /* same key and seq: the same coins; another seq: other coins */
  for (int i = 0; i < N; i++) x[i] = 0.5f / 4;
  rm__secagg_quantize(32, x, N, 1.0, 4.0, 1e9, key, 7, 0, q);
  rm__secagg_quantize(32, x, N, 1.0, 4.0, 1e9, key, 7, 0, q2);
  CHECK(memcmp(q, q2, N * sizeof *q) == 0);
  rm__secagg_quantize(32, x, N, 1.0, 4.0, 1e9, key, 8, 0, q2);
  CHECK(memcmp(q, q2, N * sizeof *q) != 0);
  /* the clamp and factor 0 */
  for (int i = 0; i < N; i++) x[i] = (i % 2 ? 1 : -1) * 1e6f;
  rm__secagg_quantize(32, x, 1000, 1.0, 4.0, 101, key, 1, 0, q);
  int outside = 0;
  for (int i = 0; i < 1000; i++) outside += q[i] != (i % 2 ? 101 : -101);
  CHECK(outside == 0);
  rm__secagg_quantize(32, x, 1000, 0.0, 4.0, 101, key, 1, 0, q);
  for (int i = 0; i < 1000; i++) outside += q[i] != 0;
  CHECK(outside == 0);
  /* 64-bit lanes: two's complement of negative values */
  int64_t q64[4];
  float neg[4] = {-1.0f, -2.5f, 3.0f, 0.0f};
  rm__secagg_quantize(64, neg, 4, 1.0, 2.0, 1e9, key, 1, 0, q64);
  CHECK(q64[0] == -2 && q64[1] == -5 && q64[2] == 6 && q64[3] == 0);
  free(x);
  free(q);
  free(q2);
}

/* ---- graphs ---- */

typedef struct graph {
  int n;
  uint8_t adj[MAXN][MAXN];
} graph_t;

/* connected after removing the vertices in `gone`? */
static int connected_without(const graph_t *g, const uint8_t *gone)
{
  int stack[MAXN], sp = 0, seen[MAXN] = {0}, start = -1, left = 0;
  for (int v = 0; v < g->n; v++)
    if (!gone[v]) {
      left++;
      if (start < 0) start = v;
    }
  if (left <= 1) return 1;
  stack[sp++] = start;
  seen[start] = 1;
  int reached = 1;
  while (sp) {
    int v = stack[--sp];
    for (int w = 0; w < g->n; w++)
      if (g->adj[v][w] && !gone[w] && !seen[w]) {
        seen[w] = 1;
        reached++;
        stack[sp++] = w;
      }
  }
  return reached == left;
}

/* Is there a vertex cut of size < k? Brute force over every subset of
 * size k - 1 (smaller cuts extend to size k - 1 cuts while n > k). */
static int has_small_cut(const graph_t *g, int k)
{
  int idx[MAXN], m = k - 1;
  uint8_t gone[MAXN];
  if (m <= 0 || m >= g->n - 1) return 0;
  for (int i = 0; i < m; i++) idx[i] = i;
  for (;;) {
    memset(gone, 0, sizeof gone);
    for (int i = 0; i < m; i++) gone[idx[i]] = 1;
    if (!connected_without(g, gone)) return 1;
    int i = m - 1;
    while (i >= 0 && idx[i] == g->n - m + i) i--;
    if (i < 0) return 0;
    idx[i]++;
    for (int j = i + 1; j < m; j++) idx[j] = idx[j - 1] + 1;
  }
}

/* Local vertex connectivity s-t (s, t not adjacent): max number of
 * internally disjoint paths, unit-capacity max-flow on the split graph
 * (v_in = 2v, v_out = 2v + 1). */
static int local_conn(const graph_t *g, int s, int t)
{
  static int cap[2 * MAXN][2 * MAXN];
  int n2 = 2 * g->n, flow = 0, prev[2 * MAXN], q[2 * MAXN];
  memset(cap, 0, sizeof cap);
  for (int v = 0; v < g->n; v++) {
    cap[2 * v][2 * v + 1] = (v == s || v == t) ? MAXN : 1;
    for (int w = 0; w < g->n; w++)
      if (g->adj[v][w]) cap[2 * v + 1][2 * w] = MAXN;
  }
  for (;;) {
    int h = 0, tl = 0, src = 2 * s + 1, dst = 2 * t;
    for (int i = 0; i < n2; i++) prev[i] = -1;
    prev[src] = src;
    q[tl++] = src;
    while (h < tl && prev[dst] < 0) {
      int v = q[h++];
      for (int w = 0; w < n2; w++)
        if (cap[v][w] > 0 && prev[w] < 0) {
          prev[w] = v;
          q[tl++] = w;
        }
    }
    if (prev[dst] < 0) return flow;
    for (int v = dst; v != src; v = prev[v]) {
      cap[prev[v]][v]--;
      cap[v][prev[v]]++;
    }
    flow++;
  }
}

static void test_graph(void)
{
  static graph_t g;
  uint8_t seed[32], guards[MAXN];
  int nbr[MAXN], scratch[MAXN], n, guard;
  for (int lg = 0; lg <= 1; lg++)
    for (int N = 2; N <= MAXN; N++) {
      int k = rm__secagg_degree(N, lg), nguard = 0, T = 2 + N % 7; /* thresholds 2..8 */
      randombytes_buf(seed, sizeof seed);
      memset(&g, 0, sizeof g);
      g.n = N;
      rm__secagg_guards(N, lg, T, seed, scratch, guards);
      for (int u = 0; u < N; u++) {
        rm__secagg_graph(N, u, lg, T, seed, nbr, &n, &guard);
        CHECKF(n == k, "N %d log %d rank %d: degree %d, want %d", N, lg, u, n, k);
        CHECK(guard == guards[u]);
        nguard += guard;
        for (int j = 0; j < n; j++) {
          CHECK(nbr[j] != u && nbr[j] >= 0 && nbr[j] < N);
          if (j) CHECK(nbr[j] > nbr[j - 1]);
          g.adj[u][nbr[j]] = 1;
        }
      }
      /* guards: the threshold, at most k + 1, at least 2 */
      int want = T < k + 1 ? T : k + 1;
      want = want < 2 ? 2 : want > N ? N : want;
      CHECKF(nguard == want, "N %d log %d T %d: %d guards, want %d", N, lg, T, nguard, want);
      for (int u = 0; u < N; u++)
        for (int v = 0; v < N; v++) CHECK(g.adj[u][v] == g.adj[v][u]);
      if (lg && N <= 12) CHECKF(!has_small_cut(&g, k), "N %d: a vertex cut below %d", N, k);
      if (lg && k < N - 1) {
        int kappa = N;
        for (int t = 1; t < N; t++)
          if (!g.adj[0][t]) {
            int c = local_conn(&g, 0, t);
            kappa = c < kappa ? c : kappa;
          }
        CHECKF(kappa >= k, "N %d: vertex connectivity %d < %d", N, kappa, k);
      }
    }
  /* the degree rule of the header */
  CHECK(rm__secagg_degree(9, 1) == 8 && rm__secagg_degree(10, 1) == 8 &&
        rm__secagg_degree(17, 1) == 10 && rm__secagg_degree(64, 1) == 12 &&
        rm__secagg_degree(5, 0) == 4);
}

/* ---- seeds and masks ---- */

static void test_masks(void)
{
  enum { L = 1003, OFF = 4096 };
  static uint8_t pk[MAXN][32], sk[MAXN][32], seeds[MAXN][MAXN][32];
  uint8_t perm_seed[32], zero_pk[32] = {0}, s[32], b[MAXN][32];
  int sizes[] = {2, 3, 5, 9, 17};
  for (int si = 0; si < 5; si++) {
    int N = sizes[si];
    for (int u = 0; u < N; u++) crypto_box_keypair(pk[u], sk[u]);
    for (int u = 0; u < N; u++)
      for (int v = 0; v < N; v++)
        if (u != v)
          CHECK(rm__secagg_seed(42, 3, u, v, sk[u], pk[u], pk[v], seeds[u][v]) == RM_OK);
    for (int u = 0; u < N; u++)
      for (int v = u + 1; v < N; v++) CHECK(!memcmp(seeds[u][v], seeds[v][u], 32));
    CHECK(memcmp(seeds[0][1], seeds[0][N - 1], 32) != 0 || N == 2);
    /* bound to job and generation */
    CHECK(rm__secagg_seed(42, 4, 0, 1, sk[0], pk[0], pk[1], s) == RM_OK &&
          memcmp(s, seeds[0][1], 32) != 0);
    CHECK(rm__secagg_seed(43, 3, 0, 1, sk[0], pk[0], pk[1], s) == RM_OK &&
          memcmp(s, seeds[0][1], 32) != 0);
    randombytes_buf(perm_seed, sizeof perm_seed);
    for (int bits = 32; bits <= 64; bits += 32)
      for (int lg = 0; lg <= 1; lg++)
        for (int self = 0; self <= 1; self++) {
          size_t w = (size_t)bits / 8;
          uint8_t *sum = calloc(L, w), *lanes = malloc(L * w), *selfsum = calloc(L, w);
          for (int u = 0; u < N; u++) {
            int nbr[MAXN], n, guard;
            uint8_t ns[MAXN][32];
            rm__secagg_graph(N, u, lg, N / 2 + 1, perm_seed, nbr, &n, &guard);
            for (int j = 0; j < n; j++) memcpy(ns[j], seeds[u][nbr[j]], 32);
            randombytes_buf(b[u], 32);
            memset(lanes, 0, L * w);
            rm__secagg_mask_add(bits, u, nbr, n, (const uint8_t(*)[32])ns,
                                self && guard ? b[u] : NULL, 5, RM__SA_PAIR, lanes, OFF, L);
            if (self && guard) rm__secagg_prg_add(bits, b[u], 5, RM__SA_SELF, 1, selfsum, OFF, L);
            for (size_t i = 0; i < L; i++) {
              if (bits == 32) ((uint32_t *)sum)[i] += ((uint32_t *)lanes)[i];
              else ((uint64_t *)sum)[i] += ((uint64_t *)lanes)[i];
            }
          }
          CHECKF(!memcmp(sum, selfsum, L * w),
                 "N %d bits %d log %d self %d: masks do not cancel", N, bits, lg, self);
          free(sum);
          free(lanes);
          free(selfsum);
        }
  }
  CHECK(rm__secagg_seed(1, 1, 0, 1, sk[0], pk[0], zero_pk, s) == RM_ERR_PROTOCOL);
  /* a stream from `first` is the tail of the stream from 0, 32 and 64 bits */
  for (int bits = 32; bits <= 64; bits += 32) {
    size_t w = (size_t)bits / 8, n = 3 * RM__SA_BLOCK / w + 5, f = RM__SA_BLOCK / w + 512 / bits;
    uint8_t *a = calloc(n, w), *t = calloc(n - f, w), key[32];
    randombytes_buf(key, 32);
    rm__secagg_prg_add(bits, key, 9, RM__SA_PAIR, 1, a, 0, n);
    rm__secagg_prg_add(bits, key, 9, RM__SA_PAIR, 1, t, f, n - f);
    CHECK(!memcmp(a + f * w, t, (n - f) * w));
    rm__secagg_prg_add(bits, key, 9, RM__SA_PAIR, -1, t, f, n - f);
    CHECK(sodium_is_zero(t, (n - f) * w));
    free(a);
    free(t);
  }
}

static void test_keystream(void)
{
  static const size_t lens[] = {0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 3000,
                                RM__SA_BLOCK, RM__SA_BLOCK + 64, 3 * RM__SA_BLOCK + 1000};
  static const uint32_t ics[] = {0, 1, 250, 65530, 0x12345678u, 0xfffff000u};
  enum { MAXL = 3 * RM__SA_BLOCK + 1000 };
  uint8_t *ref = malloc(MAXL), *got = malloc(MAXL + 1), *zeros = calloc(MAXL, 1);
  uint8_t key[32], nonce[12];
  CHECK(ref && got && zeros);
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
    for (size_t ii = 0; ii < sizeof ics / sizeof ics[0]; ii++) {
      randombytes_buf(key, sizeof key);
      randombytes_buf(nonce, sizeof nonce);
      memset(got, 0xa5, MAXL + 1);
      crypto_stream_chacha20_ietf_xor_ic(ref, zeros, lens[li], nonce, ics[ii], key);
      rm__secagg_keystream(got, lens[li], nonce, ics[ii], key);
      CHECKF(!memcmp(ref, got, lens[li]), "keystream of %zu bytes from block %u differs from "
             "libsodium's", lens[li], ics[ii]);
      CHECKF(got[lens[li]] == 0xa5, "keystream of %zu bytes wrote past its end", lens[li]);
    }
  free(ref);
  free(got);
  free(zeros);
}

int main(void)
{
  if (rm__secagg_sodium() != RM_OK) {
    fprintf(stderr, "sodium_init failed\n");
    return 1;
  }
  test_params();
  test_rounding();
  test_graph();
  test_masks();
  test_keystream();
  return rm_check_exit("test_secagg_unit");
}
