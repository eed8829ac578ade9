/*
 * test_secagg_mp.c - secure aggregation (worker/secagg/) across real
 * processes, one per rank, TCP on 127.0.0.1 (tests/lib).
 *
 *   test_secagg_mp WORLD [BITS [LOG]]     BITS 32 | 64, LOG 0 ("all") | 1
 *
 * The relay here is a RELAY TEST DOUBLE: an rm_allgather of the payloads
 * over the data plane itself. It has the relay's contract (returns only once
 * every member posted, all payloads in rank order) but not its trust
 * position - the real relay, the coordinator's barrier with payloads, is
 * tested with the coordinator.
 *
 *  (e) threshold: threshold = WORLD + 1 is refused with the documented
 *      words before any byte moves (the communicator stays usable);
 *  (a) exactness: sum_q equals a plain integer rm_allreduce of every rank's
 *      my_q bit for bit, for counts 1, 7, 1000, 1 << 20, two calls each
 *      (seq 0..7), with a clipped rank and a rank whose input holds a NaN
 *      (it contributes zeros; the second call of each count asks for no
 *      sum_q, the sharded UNMASK's float path); recv is within WORLD / scale (+ the float
 *      output's own rounding, 2^-23 relative) of a plain double all-reduce of
 *      the clipped inputs; in place too. With LOG = 1 the same over the
 *      "log" graph (ctest: WORLD 9, still complete, and 10, the circulant
 *      C_10(1..4)).
 *  (b) privacy, as far as a test can show it (BITS 32): with the TCP TAP on
 *      (RINGMASTER_TEST_TAP, every payload a rank receives,
 *      tests/doubles/tcp_tap.c, reached through RINGMASTER_TEST_HOOKS_LIB),
 *      inputs with an obvious pattern x_u[i] = 0.01 (1 + u % 3) ((i % 64) -
 *      32); the records of the vectors (>= 4096 bytes: the relay double's
 *      and CONFIRM's small messages are left out) must look uniform:
 *        chi-square of the bytes over 256 bins < 377.3 (255 degrees of
 *        freedom, p = 1e-6, Wilson-Hilferty), per rank;
 *        |Pearson r| < 0.01 between received i32 lanes and the pattern,
 *        per rank, over >= 1M lanes. ALIGNMENT: the ring is forced and
 *        count is a multiple of 64 WORLD, so every chunk starts at a
 *        multiple of 64 and every segment at a multiple of 65536 lanes
 *        (ring.c): lane j of a record is vector index = j (mod 64).
 *      A CONTROL run all-reduces the plain quantized q (no masks) through
 *      the same tap and must FAIL both statistics (the test has power).
 *  (c) fresh masks (same tap records): the same input twice (seq 0, 1) and
 *      again in a new generation (seq 0 again, fresh keys) gives records
 *      that share fewer than 0.1% of their lanes.
 *  (d) RINGMASTER_TEST_SECAGG_TAMPER=1 -> RM_ERR_PROTOCOL (CONFIRM) on
 *      every rank; (g) RINGMASTER_TEST_SECAGG_DIE=WORLD-1:open:1 -> call 1
 *      fails on every survivor (nobody unmasks);
 *      RINGMASTER_TEST_SECAGG_DIE=WORLD-1:gather:1 (threshold WORLD, so the
 *      UNMASK is sharded) -> past the commit point: call 1 succeeds on every
 *      survivor with call 0's sum (each finishes alone from Y). Both need a
 *      build with test hooks; otherwise skipped with a message.
 *  (h) a KEYS slot that fails its check on one rank (the relay double lies
 *      to rank 0 about rank 1's generation): RM_ERR_PROTOCOL naming rank 1
 *      there, and every other rank fails CONFIRM with it (the refusing rank
 *      poisons CONFIRM) instead of waiting; the communicator stays usable.
 * Tap files live in a mkdtemp directory that is removed at the end.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rm_testhook.h"
#include "rm_testlib.h"
#include "secagg/secagg.h"
#include "secagg/secagg_int.h"

#define PRIV_COUNT (64 * 2520 * 3) /* 2520 = lcm(1..10): a multiple of 64 WORLD */
#define BIG_RECORD 4096
#define CHI2_CRIT 377.3
#define CLIP 50.0

static int g_bits = 32, g_log = 0;

#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s: ", rank, __FILE__,   \
              __LINE__, #cond);                                               \
      fprintf(stderr, __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                    \
      return 1;                                                               \
    }                                                                         \
  } while (0)

/* RELAY TEST DOUBLE (see the top of the file). */
static rm_status_t relay_double(void *ctx, const char *name, const void *mine, size_t len,
                                void *all, char *err, size_t errlen)
{
  rm_comm_t *c = ctx;
  (void)name;
  rm_status_t st = rm_allgather(c, mine, all, len, RM_U8);
  if (st != RM_OK) snprintf(err, errlen, "%s", rm_comm_last_error(c));
  return st;
}

static rm_status_t open_sa(rm_comm_t *c, uint64_t gen, int threshold, rm__secagg_t **sa,
                           char *err, size_t errlen)
{
  rm__secagg_params_t p = {.bits = g_bits, .clip = CLIP, .scale = 0, .threshold = threshold,
                           .neighbours_log = g_log, .job_id = 42, .generation = gen};
  rm__secagg_relay_t relay = {.ctx = c, .exchange = relay_double};
  return rm__secagg_open(c, &p, &relay, sa, err, errlen);
}

/* deterministic input in [-1, 1) */
static float noise(int rank, size_t i, int call)
{
  uint64_t z = (uint64_t)rank * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull +
               (uint64_t)call * 0x94D049BB133111EBull;
  z ^= z >> 31;
  z *= 0xD6E9F8CC1C1B5C4Dull;
  z ^= z >> 29;
  return (float)((double)(z >> 11) / 4503599627370496.0 - 1.0);
}

/* The same double, lying to rank 0: it rewrites the generation in rank
 * 1's KEYS slot (a stale or replayed key). */
static rm_status_t relay_double_lying(void *ctx, const char *name, const void *mine,
                                      size_t len, void *all, char *err, size_t errlen)
{
  rm_comm_t *c = ctx;
  rm_status_t st = relay_double(ctx, name, mine, len, all, err, errlen);
  if (st == RM_OK && rm_comm_rank(c) == 0 && !strcmp(name, "secagg/keys"))
    ((uint8_t *)all)[len + 32] ^= 1; /* slot 1, generation's low byte */
  return st;
}

/* ---- (h) a refused KEYS slot fails every rank together ---- */
static int test_bad_slot(rm_comm_t *c, int rank)
{
  char err[512] = "";
  rm__secagg_t *sa = NULL;
  rm__secagg_params_t p = {.bits = g_bits, .clip = CLIP, .threshold = 2,
                           .neighbours_log = g_log, .job_id = 42, .generation = 1};
  rm__secagg_relay_t relay = {.ctx = c, .exchange = relay_double_lying};
  rm_status_t st = rm__secagg_open(c, &p, &relay, &sa, err, sizeof err);
  EXPECT(st == RM_ERR_PROTOCOL && sa == NULL, "%s: %s", rm_status_name(st), err);
  if (rank == 0)
    EXPECT(strstr(err, "KEYS: rank 1's public key is bound to generation 0 rank 1") != NULL,
           "words: %s", err);
  else
    EXPECT(strstr(err, "CONFIRM") != NULL, "words: %s", err);
  EXPECT(rm_barrier(c) == RM_OK, "communicator unusable after a refused slot");
  return 0;
}

/* ---- (e) threshold ---- */
static int test_threshold(rm_comm_t *c, int rank, int world)
{
  char err[256], want[256];
  rm__secagg_t *sa = NULL;
  rm_status_t st = open_sa(c, 1, world + 1, &sa, err, sizeof err);
  snprintf(want, sizeof want, "secure aggregation: %d members, threshold %d: refusing to "
           "reveal a sum over fewer inputs", world, world + 1);
  EXPECT(st == RM_ERR_INVALID_ARG && sa == NULL, "status %s", rm_status_name(st));
  EXPECT(!strcmp(err, want), "words: %s", err);
  EXPECT(rm_barrier(c) == RM_OK, "communicator unusable after a refusal");
  return 0;
}

/* ---- (a) exactness ---- */
static int check_call(rm_comm_t *c, rm__secagg_t *sa, int rank, int world, size_t count,
                      int call, uint64_t want_seq, int in_place)
{
  size_t w = (size_t)g_bits / 8;
  float *x = malloc(count * sizeof *x), *out = malloc(count * sizeof *out);
  void *myq = malloc(count * w), *sumq = malloc(count * w), *refq = malloc(count * w);
  double *ref = malloc(count * sizeof *ref);
  char err[512] = "";
  rm__secagg_stats_t st;
  int bad = 1;
  if (!x || !out || !myq || !sumq || !refq || !ref) RM_TEST_FAIL("out of memory");
  /* rank 1 is clipped (norm ~ 3 sqrt(count / 3) * 40 > CLIP for count >= 7),
   * the last rank holds a NaN in call 1 of count 7 (contributes zeros) */
  double amp = rank == 1 ? 40.0 : 0.7;
  for (size_t i = 0; i < count; i++) x[i] = (float)(amp * noise(rank, i, call));
  int nan_rank = count == 7 && call % 2 == 1 && rank == world - 1;
  if (nan_rank) x[3] = NAN;
  float *send = x;
  if (in_place) {
    memcpy(out, x, count * sizeof *x);
    send = out;
  }
  /* call 1 asks for no sum_q: the sharded UNMASK then gathers floats */
  void *want_sumq = call % 2 == 0 ? sumq : NULL;
  rm_status_t rc =
      rm__secagg_sum_f32(sa, send, out, count, 0, myq, want_sumq, &st, err, sizeof err);
  EXPECT(rc == RM_OK, "count %zu call %d: %s: %s", count, call, rm_status_name(rc), err);
  EXPECT(st.seq == want_seq && st.members == world, "seq %llu members %d",
         (unsigned long long)st.seq, st.members);
  EXPECT(st.bytes_sent > 0, "bytes_sent 0");
  EXPECT(st.clipped == (nan_rank || st.norm > CLIP), "clipped %d norm %g", st.clipped, st.norm);
  EXPECT(nan_rank ? !isfinite(st.norm) : isfinite(st.norm), "norm %g", st.norm);
  /* exact: the unmasked sum is the plain integer sum of the quantized inputs */
  rc = rm_allreduce(c, myq, refq, count, g_bits == 32 ? RM_I32 : RM_I64, RM_SUM);
  EXPECT(rc == RM_OK, "reference all-reduce");
  EXPECT(!want_sumq || !memcmp(refq, sumq, count * w),
         "count %zu call %d: sum_q differs from the plain sum", count, call);
  /* the float result against the clipped inputs in double */
  double factor = !isfinite(st.norm) ? 0 : st.norm > CLIP ? CLIP / st.norm : 1;
  for (size_t i = 0; i < count; i++) ref[i] = factor == 0 ? 0 : (double)x[i] * factor;
  EXPECT(rm_allreduce(c, ref, ref, count, RM_F64, RM_SUM) == RM_OK, "reference f64");
  double scale = rm__secagg_default_scale(g_bits, CLIP, world), worst = 0;
  size_t off = 0;
  for (size_t i = 0; i < count; i++) {
    double e = fabs((double)out[i] - ref[i]), tol = world / scale + fabs(ref[i]) * 0x1p-23;
    if (e / tol > worst) {
      worst = e / tol;
      off = i;
    }
  }
  EXPECT(worst <= 1, "count %zu call %d: coordinate %zu off by %g of the bound %g", count,
         call, off, worst, world / scale);
  bad = 0;
  free(x);
  free(out);
  free(myq);
  free(sumq);
  free(refq);
  free(ref);
  return bad;
}

static int test_exact(rm_comm_t *c, int rank, int world)
{
  static const size_t counts[] = {1, 7, 1000, 1 << 20};
  char err[512] = "";
  rm__secagg_t *sa = NULL;
  rm_status_t st = open_sa(c, 1, world, &sa, err, sizeof err); /* threshold = world: allowed */
  EXPECT(st == RM_OK, "open: %s: %s", rm_status_name(st), err);
  uint64_t seq = 0;
  for (int k = 0; k < 4; k++)
    for (int call = 0; call < 2; call++, seq++)
      if (check_call(c, sa, rank, world, counts[k], call, seq, call == 1 && k == 2)) return 1;
  /* count 0 is a valid, empty call */
  EXPECT(rm__secagg_sum_f32(sa, NULL, NULL, 0, 0, NULL, NULL, NULL, err, sizeof err) == RM_OK, "%s",
         err);
  rm__secagg_close(sa);
  return 0;
}

static int run_rank(rm_comm_t *c, void *arg)
{
  int rank = rm_comm_rank(c), world = rm_comm_world(c);
  (void)arg;
  if (test_threshold(c, rank, world)) return 1;
  if (test_bad_slot(c, rank)) return 1;
  if (test_exact(c, rank, world)) return 1;
  return 0;
}

/* ---- (b), (c): the tapped runs ---- */
static float pattern(int rank, size_t i) { return 0.01f * (float)(1 + rank % 3) * (float)((int)(i % 64) - 32); }

static int priv_rank(rm_comm_t *c, void *arg)
{
  int rank = rm_comm_rank(c), world = rm_comm_world(c), control = *(int *)arg;
  float *x = malloc(PRIV_COUNT * sizeof *x), *out = malloc(PRIV_COUNT * sizeof *out);
  int32_t *q = malloc(PRIV_COUNT * sizeof *q);
  char err[512] = "";
  if (!x || !out || !q) RM_TEST_FAIL("out of memory");
  EXPECT(rm_comm_set_algorithm(c, RM_ALGO_RING) == RM_OK, "ring"); /* the alignment */
  for (size_t i = 0; i < PRIV_COUNT; i++) x[i] = pattern(rank, i);
  if (control) { /* the same quantization, no masks: three plain all-reduces */
    uint8_t key[32];
    double scale = rm__secagg_default_scale(32, CLIP, world);
    for (int i = 0; i < 32; i++) key[i] = (uint8_t)(rank * 31 + i);
    for (int call = 0; call < 3; call++) {
      rm__secagg_quantize(32, x, PRIV_COUNT, 1.0, scale, floor(CLIP * scale) + 1, key,
                          (uint64_t)call, 0, q);
      EXPECT(rm_allreduce(c, q, q, PRIV_COUNT, RM_I32, RM_SUM) == RM_OK, "control");
    }
  } else { /* seq 0, seq 1, then a new generation's seq 0, same input */
    for (uint64_t gen = 1; gen <= 2; gen++) {
      rm__secagg_t *sa = NULL;
      /* threshold = world: every rank a guard, so from 3 ranks on the
       * sharded UNMASK's all-gather is on the tap too */
      rm_status_t st = open_sa(c, gen, world, &sa, err, sizeof err);
      EXPECT(st == RM_OK, "open: %s", err);
      for (int call = 0; call < (gen == 1 ? 2 : 1); call++) {
        st = rm__secagg_sum_f32(sa, x, out, PRIV_COUNT, 0, NULL, NULL, NULL, err, sizeof err);
        EXPECT(st == RM_OK, "sum: %s", err);
      }
      rm__secagg_close(sa);
    }
  }
  free(x);
  free(out);
  free(q);
  return 0;
}

typedef struct tapfile {
  uint8_t *data;
  size_t len;
  size_t *rec; /* offsets of the big records' payloads */
  uint32_t *rlen;
  size_t nrec;
} tapfile_t;

static int tap_load(const char *path, tapfile_t *t)
{
  FILE *f = fopen(path, "rb");
  struct stat sb;
  memset(t, 0, sizeof *t);
  if (f == NULL || fstat(fileno(f), &sb) != 0) return -1;
  t->len = (size_t)sb.st_size;
  t->data = malloc(t->len + 1);
  if (fread(t->data, 1, t->len, f) != t->len) {
    fclose(f);
    return -1;
  }
  fclose(f);
  size_t cap = t->len / BIG_RECORD + 1;
  t->rec = malloc(cap * sizeof *t->rec);
  t->rlen = malloc(cap * sizeof *t->rlen);
  for (size_t at = 0; at + 4 <= t->len;) {
    uint32_t n = (uint32_t)t->data[at] | (uint32_t)t->data[at + 1] << 8 |
                 (uint32_t)t->data[at + 2] << 16 | (uint32_t)t->data[at + 3] << 24;
    if (at + 4 + n > t->len) return -1; /* a torn record */
    if (n >= BIG_RECORD) {
      t->rec[t->nrec] = at + 4;
      t->rlen[t->nrec++] = n;
    }
    at += 4 + n;
  }
  return 0;
}

typedef struct tapstat {
  double chi2, r;
  size_t lanes;
  double same_seq, same_gen; /* (c): fraction of equal lanes */
} tapstat_t;

/* The pattern per lane is the same up to the rank factor, which cannot
 * change a correlation's size: correlate with (j % 64) - 32. */
static void tap_stats(const tapfile_t *t, tapstat_t *s)
{
  double cnt[256] = {0}, n = 0, sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  for (size_t k = 0; k < t->nrec; k++) {
    const uint8_t *p = t->data + t->rec[k];
    for (uint32_t b = 0; b < t->rlen[k]; b++) cnt[p[b]]++;
    for (uint32_t j = 0; j + 4 <= t->rlen[k]; j += 4) {
      int32_t v;
      memcpy(&v, p + j, 4);
      double xv = v, yv = (double)((int)((j / 4) % 64) - 32);
      n++;
      sx += xv;
      sy += yv;
      sxx += xv * xv;
      syy += yv * yv;
      sxy += xv * yv;
    }
  }
  double bytes = 0;
  for (int b = 0; b < 256; b++) bytes += cnt[b];
  s->chi2 = 0;
  for (int b = 0; b < 256; b++) s->chi2 += (cnt[b] - bytes / 256) * (cnt[b] - bytes / 256) / (bytes / 256);
  double cov = sxy / n - sx / n * sy / n, vx = sxx / n - sx / n * sx / n, vy = syy / n - sy / n * sy / n;
  s->r = vx > 0 && vy > 0 ? cov / sqrt(vx * vy) : 1; /* constant lanes: all structure */
  s->lanes = (size_t)n;
  /* (c): records of call A (seq 0), B (seq 1), C (new generation seq 0) */
  s->same_seq = s->same_gen = -1;
  if (t->nrec % 3 == 0 && t->nrec > 0) {
    size_t K = t->nrec / 3, eq1 = 0, eq2 = 0, tot = 0;
    for (size_t k = 0; k < K; k++) {
      const uint8_t *a = t->data + t->rec[k], *b = t->data + t->rec[k + K],
                    *cc = t->data + t->rec[k + 2 * K];
      if (t->rlen[k] != t->rlen[k + K] || t->rlen[k] != t->rlen[k + 2 * K]) return;
      for (uint32_t j = 0; j + 4 <= t->rlen[k]; j += 4) {
        eq1 += !memcmp(a + j, b + j, 4);
        eq2 += !memcmp(a + j, cc + j, 4);
        tot++;
      }
    }
    s->same_seq = (double)eq1 / tot;
    s->same_gen = (double)eq2 / tot;
  }
}

/* Analyse every tap file of one run (prefix `name` in dir); 0 = as expected. */
static int tap_check(const char *dir, const char *name, int world, int control)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int files = 0, bad = 0;
  size_t nl = strlen(name);
  if (d == NULL) return 1;
  while ((e = readdir(d)) != NULL) {
    char path[4096];
    tapfile_t t;
    tapstat_t s;
    if (strncmp(e->d_name, name, nl) || e->d_name[nl] != '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (tap_load(path, &t) != 0) {
      fprintf(stderr, "tap %s: unreadable or torn\n", path);
      bad++;
      continue;
    }
    files++;
    tap_stats(&t, &s);
    printf("tap %-8s %-14s %zu records, %zu lanes: chi2 %.1f (crit %.1f), r %+.5f, "
           "equal lanes across seq %.5f, across generations %.5f\n", name, e->d_name, t.nrec,
           s.lanes, s.chi2, CHI2_CRIT, s.r, s.same_seq, s.same_gen);
    if (s.lanes < 1000000) {
      fprintf(stderr, "tap %s: only %zu lanes\n", e->d_name, s.lanes);
      bad++;
    }
    if (control) { /* the statistics must see the structure */
      bad += !(s.chi2 > CHI2_CRIT);
      bad += !(fabs(s.r) >= 0.01);
    } else {
      bad += !(s.chi2 < CHI2_CRIT);
      bad += !(fabs(s.r) < 0.01);
      bad += !(s.same_seq >= 0 && s.same_seq < 1e-3);
      bad += !(s.same_gen >= 0 && s.same_gen < 1e-3);
    }
    free(t.data);
    free(t.rec);
    free(t.rlen);
  }
  closedir(d);
  if (files != world) {
    fprintf(stderr, "tap %s: %d files, want %d\n", name, files, world);
    bad++;
  }
  return bad;
}

static void rm_dir(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[4096];
  if (d == NULL) return;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* The hooks' behaviour is the tests' shared object (common/rm_testhook.h):
 * without it a test-hook build has points that do nothing, and a check
 * that then saw no tap records or no death would say nothing true. */
static int hooks_named(const char *what)
{
  const char *p = getenv("RINGMASTER_TEST_HOOKS_LIB");
  if (p != NULL && p[0] != '\0') return 1;
  fprintf(stderr, "%s: RINGMASTER_TEST_HOOKS_LIB must name tests/doubles' "
                  "libringmaster_doubles.so (ctest sets it)\n", what);
  return 0;
}

static int test_privacy(int world, const rm_test_opts_t *o)
{
  char tmpl[] = "/tmp/rm_secagg_tap.XXXXXX", prefix[4200];
  int bad = 0, control;
  if (!RM_TESTHOOKS) {
    printf("privacy (b, c): skipped: built without RINGMASTER_TEST_HOOKS (no tap)\n");
    return 0;
  }
  if (!hooks_named("privacy (b, c)")) return 1;
  if (g_bits != 32) return 0; /* the statistics read i32 lanes */
  char *dir = mkdtemp(tmpl);
  if (dir == NULL) return 1;
  for (control = 0; control <= 1; control++) {
    const char *name = control ? "plain" : "masked";
    snprintf(prefix, sizeof prefix, "%s/%s", dir, name);
    setenv("RINGMASTER_TEST_TAP", prefix, 1); /* read by each rank's first receive */
    int failed = rm_test_run_opts(world, priv_rank, &control, o);
    unsetenv("RINGMASTER_TEST_TAP");
    if (failed) {
      fprintf(stderr, "privacy run (%s): %d rank(s) failed\n", name, failed);
      bad++;
      continue;
    }
    int b = tap_check(dir, name, world, control);
    if (b) fprintf(stderr, "privacy run (%s): %d statistic(s) not as expected\n", name, b);
    bad += b;
  }
  rm_dir(dir);
  return bad;
}

/* ---- (d) tamper, (g) die ---- */
static int tamper_rank(rm_comm_t *c, void *arg)
{
  int rank = rm_comm_rank(c);
  char err[512] = "";
  rm__secagg_t *sa = NULL;
  (void)arg;
  rm_status_t st = open_sa(c, 1, 2, &sa, err, sizeof err);
  EXPECT(st == RM_ERR_PROTOCOL && sa == NULL, "tampered key: %s: %s", rm_status_name(st), err);
  EXPECT(strstr(err, "CONFIRM") != NULL, "words: %s", err);
  EXPECT(rm_barrier(c) == RM_OK, "communicator unusable after CONFIRM failed");
  return 0;
}

static int die_rank(rm_test_world_t *w, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  char err[512] = "";
  rm__secagg_t *sa = NULL;
  float x[1000], out[1000];
  (void)arg;
  rm_test_config(w, rank, &cfg);
  if (rm_comm_init(&cfg, &c) != RM_OK) return 1;
  for (int i = 0; i < 1000; i++) x[i] = noise(rank, (size_t)i, 0);
  EXPECT(open_sa(c, 1, 2, &sa, err, sizeof err) == RM_OK, "open: %s", err);
  rm_status_t st = rm__secagg_sum_f32(sa, x, out, 1000, 0, NULL, NULL, NULL, err, sizeof err);
  EXPECT(st == RM_OK, "call 0: %s", err);
  /* the victim dies entering OPEN of call 1: every member holds the masked
   * sum, nobody gets the guards' seeds */
  st = rm__secagg_sum_f32(sa, x, out, 1000, 0, NULL, NULL, NULL, err, sizeof err);
  EXPECT(st != RM_OK, "call 1 completed without the lost member's OPEN");
  rm__secagg_close(sa);
  rm_test_finish(&w->res[rank], c, st);
  return 0;
}

/* The double, settled: a second, one-byte all-gather after the payloads.
 * A member that finished it knows every member holds the payloads (each
 * sent its byte only then), like the coordinator's answer to all at once;
 * its failure (a member lost since) does not take back what arrived. */
static rm_status_t relay_double_settled(void *ctx, const char *name, const void *mine,
                                        size_t len, void *all, char *err, size_t errlen)
{
  uint8_t one = 1, ones[16];
  rm_status_t st = relay_double(ctx, name, mine, len, all, err, errlen);
  if (st == RM_OK) (void)rm_allgather(ctx, &one, ones, 1, RM_U8);
  return st;
}

/* The victim dies after OPEN of call 1, entering the sharded UNMASK's
 * all-gather: past the commit point, so every survivor finishes the call
 * from Y alone and gets the same sum as call 0's (fresh rounding: within
 * 2 world / scale). threshold = world: every rank a guard, sharded. */
static int die_gather_rank(rm_test_world_t *w, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  char err[512] = "";
  rm__secagg_t *sa = NULL;
  float x[1000], out0[1000], out1[1000];
  int world = *(const int *)arg;
  rm_test_config(w, rank, &cfg);
  if (rm_comm_init(&cfg, &c) != RM_OK) return 1;
  for (int i = 0; i < 1000; i++) x[i] = noise(rank, (size_t)i, 0);
  rm__secagg_params_t p = {.bits = g_bits, .clip = CLIP, .threshold = world,
                           .neighbours_log = g_log, .job_id = 42, .generation = 1};
  rm__secagg_relay_t relay = {.ctx = c, .exchange = relay_double_settled};
  EXPECT(rm__secagg_open(c, &p, &relay, &sa, err, sizeof err) == RM_OK, "open: %s", err);
  rm_status_t st = rm__secagg_sum_f32(sa, x, out0, 1000, 0, NULL, NULL, NULL, err, sizeof err);
  EXPECT(st == RM_OK, "call 0: %s", err);
  st = rm__secagg_sum_f32(sa, x, out1, 1000, 0, NULL, NULL, NULL, err, sizeof err);
  EXPECT(st == RM_OK, "call 1, a member lost after OPEN: %s", err);
  double tol = 2 * world / rm__secagg_scale(sa);
  for (int i = 0; i < 1000; i++)
    EXPECT(fabs((double)out1[i] - out0[i]) <= tol + fabs(out0[i]) * 0x1p-22,
           "coordinate %d: %g after the loss, %g before", i, out1[i], out0[i]);
  rm__secagg_close(sa);
  rm_test_finish(&w->res[rank], c, RM_OK);
  return 0;
}

static int test_hooks(int world, const rm_test_opts_t *o)
{
  char v[64];
  int bad = 0;
  if (!RM_TESTHOOKS) {
    printf("tamper (d), die (g): skipped: built without RINGMASTER_TEST_HOOKS\n");
    return 0;
  }
  if (!hooks_named("tamper (d), die (g)")) return 1;
  setenv("RINGMASTER_TEST_SECAGG_TAMPER", "1", 1);
  int failed = rm_test_run_opts(world, tamper_rank, NULL, o);
  unsetenv("RINGMASTER_TEST_SECAGG_TAMPER");
  if (failed) fprintf(stderr, "tamper: %d rank(s) failed\n", failed);
  bad += failed;
  if (world >= 3) {
    rm_test_world_t w;
    snprintf(v, sizeof v, "%d:open:1", world - 1);
    setenv("RINGMASTER_TEST_SECAGG_DIE", v, 1);
    if (rm_test_world_open(&w, world) != 0) return bad + 1;
    if (rm_test_start(&w, die_rank, NULL) == 0) failed = rm_test_wait(&w, 60000, world - 1);
    else failed = world;
    unsetenv("RINGMASTER_TEST_SECAGG_DIE");
    if (failed) fprintf(stderr, "die at open: %d survivor(s) failed\n", failed);
    bad += failed;
    rm_test_world_close(&w);
    snprintf(v, sizeof v, "%d:gather:1", world - 1);
    setenv("RINGMASTER_TEST_SECAGG_DIE", v, 1);
    if (rm_test_world_open(&w, world) != 0) return bad + 1;
    if (rm_test_start(&w, die_gather_rank, &world) == 0)
      failed = rm_test_wait(&w, 60000, world - 1);
    else failed = world;
    unsetenv("RINGMASTER_TEST_SECAGG_DIE");
    if (failed) fprintf(stderr, "die at gather: %d survivor(s) failed\n", failed);
    bad += failed;
    rm_test_world_close(&w);
  }
  return bad;
}

int main(int argc, char **argv)
{
  int world = argc > 1 ? atoi(argv[1]) : 4;
  rm_test_opts_t o = {.timeout_ms = 100000, .comm_timeout_ms = 30000};
  g_bits = argc > 2 ? atoi(argv[2]) : 32;
  g_log = argc > 3 ? atoi(argv[3]) : 0;
  if (world < 2 || world > 16 || (g_bits != 32 && g_bits != 64)) return 2;
  if (rm__secagg_sodium() != RM_OK) return 1;
  int bad = rm_test_run_opts(world, run_rank, NULL, &o);
  if (bad) fprintf(stderr, "test_secagg_mp: %d rank(s) failed (threshold, exactness)\n", bad);
  bad += test_privacy(world, &o);
  bad += test_hooks(world, &o);
  if (bad) {
    fprintf(stderr, "test_secagg_mp world %d bits %d log %d: FAILED\n", world, g_bits, g_log);
    return 1;
  }
  printf("test_secagg_mp world %d bits %d log %d: all checks passed\n", world, g_bits, g_log);
  return 0;
}
