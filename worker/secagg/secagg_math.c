/*
 * secagg_math.c - the arithmetic of secure aggregation (secagg.c has the
 * protocol and its security argument): parameters and their capacity rule,
 * the neighbour graph, the seed KDF, the ChaCha20 PRG fused with lane
 * add/subtract, and stochastic-rounding quantization.
 *
 * CAPACITY. q_i = stochastic_round(x_i * scale) with |x_i| <= ||x||_2 <=
 * clip after clipping, so |q_i| <= clip * scale + 1 (the +1: rounding up).
 * The sum of `world` such values lies in (-2^(bits-1), 2^(bits-1)) when
 *     world * (clip * scale + 1) < 2^(bits-1),
 * so read as two's complement the wrapped sum in Z_{2^bits} IS the integer
 * sum: masks may wrap freely, the unmasked sum cannot. The default scale
 * keeps a factor 2 of headroom (<= 2^(bits-2)). Quantized values are
 * clamped to [-bound, bound], bound = floor(clip * scale) + 1, so a clip
 * factor that rounds one ulp high cannot break the rule.
 *
 * ROUNDING. v = x * scale in double (x is float and scale a power of two by
 * default, so v is exact then); q = floor(v) + [coin < floor(frac(v) *
 * 2^32)] with coin a uniform u32 (32-bit lanes: both at 16 bits, see
 * quant32 below). E[q] = v up to 2^-32 (64-bit lanes) or 2^-16 (32-bit) of
 * a quantum (the coin's resolution) and |q - v| < 1. Per coordinate of the sum over `world`
 * members the error is < world quanta, i.e. the dequantized SUM is within
 * world / scale of the sum of the clipped inputs (before the final float
 * rounding of the output, relative 2^-24); the errors are independent and
 * zero-mean, so typically ~ sqrt(world) / (2 scale).
 *
 * PRG. ChaCha20-IETF (RFC 8439) with a 32-byte key (a seed), nonce = seq
 * u64 LE || purpose u32 LE; lane j of a stream is keystream bytes
 * [j*w, (j+1)*w) little-endian, w = bits/8. Keystream is produced
 * RM__SA_BLOCK bytes at a time at block counter first*w/64 and consumed at
 * once (added or subtracted), so no N x D buffer ever exists. The keystream
 * itself is secagg_chacha.c's (16 blocks wide where AVX-512F is, else
 * libsodium's; the same bytes either way).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "rm_le.h"
#include "secagg/secagg.h"
#include "secagg/secagg_int.h"

static const char kdf_label[] = "ringmaster-secagg-v1";





static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_rc = -1;
static void sodium_start(void) { sodium_rc = sodium_init(); }

rm_status_t rm__secagg_sodium(void)
{
  pthread_once(&sodium_once, sodium_start);
  return sodium_rc < 0 ? RM_ERR_INTERNAL : RM_OK;
}

/* ---- parameters ---- */

double rm__secagg_default_scale(int bits, double clip, int world)
{
  if ((bits != 32 && bits != 64) || !(clip > 0) || !isfinite(clip) || world < 1) return 0;
  double cap = ldexp(1.0, bits - 2);
  double m = (cap / world - 1) / clip; /* the largest scale the rule allows */
  if (!(m > 0) || !isfinite(m)) return 0;
  int e;
  (void)frexp(m, &e); /* m = f 2^e, f in [0.5, 1): 2^(e-1) <= m */
  double s = ldexp(1.0, e - 1);
  while (s > 0 && world * (clip * s + 1) > cap) s /= 2; /* rounding of m */
  return s;
}

/* "2^31" for a power of two, else %g */
static void fmt_scale(char *b, size_t n, double s)
{
  int e;
  double f = frexp(s, &e);
  if (f == 0.5) snprintf(b, n, "2^%d", e - 1);
  else snprintf(b, n, "%g", s);
}

rm_status_t rm__secagg_check(const rm__secagg_params_t *p, int world, char *why,
                             size_t whylen)
{
  char sc[32];
  if (p->bits != 32 && p->bits != 64) {
    snprintf(why, whylen, "secure aggregation: bits must be 32 or 64, not %d", p->bits);
    return RM_ERR_INVALID_ARG;
  }
  if (!(p->clip > 0) || !isfinite(p->clip)) {
    snprintf(why, whylen, "secure aggregation: clip must be finite and > 0, not %g", p->clip);
    return RM_ERR_INVALID_ARG;
  }
  if (p->scale != 0 && (!(p->scale > 0) || !isfinite(p->scale))) {
    snprintf(why, whylen, "secure aggregation: scale must be finite and > 0 (0 = default), not %g",
             p->scale);
    return RM_ERR_INVALID_ARG;
  }
  if (p->threshold < 2) {
    snprintf(why, whylen, "secure aggregation: threshold must be >= 2, not %d", p->threshold);
    return RM_ERR_INVALID_ARG;
  }
  if (world < p->threshold) {
    snprintf(why, whylen, "secure aggregation: %d members, threshold %d: refusing to reveal "
             "a sum over fewer inputs", world, p->threshold);
    return RM_ERR_INVALID_ARG;
  }
  double s = p->scale != 0 ? p->scale : rm__secagg_default_scale(p->bits, p->clip, world);
  if (!(s > 0) || (double)world * (p->clip * s + 1) >= ldexp(1.0, p->bits - 1)) {
    fmt_scale(sc, sizeof sc, s);
    snprintf(why, whylen, "%d bits cannot hold %d x (clip %g x scale %s + 1)", p->bits, world,
             p->clip, s > 0 ? sc : "(none fits)");
    return RM_ERR_INVALID_ARG;
  }
  if (why && whylen) why[0] = 0;
  return RM_OK;
}

/* ---- graph ---- */

int rm__secagg_degree(int world, int neighbours_log)
{
  if (world < 2) return 0;
  if (!neighbours_log) return world - 1;
  int lg = 0;
  while ((1ll << lg) < world) lg++;
  return 2 * lg < world - 1 ? 2 * lg : world - 1;
}

/* u32 draws from PRG(seed; 0, RM__SA_PERM), 64 bytes at a time */
typedef struct coins {
  const uint8_t *key;
  uint8_t nonce[12], buf[64];
  uint32_t ic;
  int at;
} coins_t;

static uint32_t coin32(coins_t *c)
{
  if (c->at == 64) {
    memset(c->buf, 0, sizeof c->buf);
    crypto_stream_chacha20_ietf_xor_ic(c->buf, c->buf, sizeof c->buf, c->nonce, c->ic++, c->key);
    c->at = 0;
  }
  uint32_t v = rm__get_le32(c->buf + c->at);
  c->at += 4;
  return v;
}

void rm__secagg_perm(int world, const uint8_t perm_seed[32], int *perm)
{
  coins_t c = {.key = perm_seed, .ic = 0, .at = 64};
  rm__put_le64(c.nonce, 0);
  rm__put_le32(c.nonce + 8, RM__SA_PERM);
  for (int i = 0; i < world; i++) perm[i] = i;
  for (int i = world - 1; i > 0; i--) {
    uint32_t m = (uint32_t)i + 1, lim = UINT32_MAX - UINT32_MAX % m, r;
    do r = coin32(&c); while (r >= lim); /* rejection: no modulo bias */
    int j = (int)(r % m), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  sodium_memzero(c.buf, sizeof c.buf);
}

static int cmp_int(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int rm__secagg_nguards(int world, int neighbours_log, int threshold)
{
  int k = rm__secagg_degree(world, neighbours_log), g = threshold < k + 1 ? threshold : k + 1;
  g = g < 2 ? 2 : g;
  return g < world ? g : world;
}

void rm__secagg_graph(int world, int rank, int neighbours_log, int threshold,
                      const uint8_t perm_seed[32], int *nbr, int *n, int *guard)
{
  int k = rm__secagg_degree(world, neighbours_log), m = 0, p = 0;
  int near[64]; /* k <= 2 ceil(log2 world) <= 62 when not complete */
  rm__secagg_perm(world, perm_seed, nbr); /* nbr as scratch: world entries */
  while (nbr[p] != rank) p++;
  *guard = p < rm__secagg_nguards(world, neighbours_log, threshold);
  if (k >= world - 1) { /* complete graph: every other rank a neighbour */
    for (int r = 0; r < world; r++)
      if (r != rank) nbr[m++] = r;
    *n = m;
    return;
  }
  for (int d = 1; d <= k / 2; d++) {
    near[m++] = nbr[(p + d) % world];
    near[m++] = nbr[(p - d + world) % world];
  }
  qsort(near, (size_t)m, sizeof near[0], cmp_int);
  memcpy(nbr, near, (size_t)m * sizeof near[0]);
  *n = m;
}

void rm__secagg_guards(int world, int neighbours_log, int threshold,
                       const uint8_t perm_seed[32], int *scratch, uint8_t *guard)
{
  int g = rm__secagg_nguards(world, neighbours_log, threshold);
  rm__secagg_perm(world, perm_seed, scratch);
  memset(guard, 0, (size_t)world);
  for (int p = 0; p < g; p++) guard[scratch[p]] = 1;
}

/* ---- KDF ---- */

rm_status_t rm__secagg_seed(uint64_t job, uint64_t generation, int self, int other,
                            const uint8_t sk_self[32], const uint8_t pk_self[32],
                            const uint8_t pk_other[32], uint8_t seed[32])
{
  uint8_t shared[crypto_scalarmult_BYTES], hdr[24];
  crypto_generichash_state h;
  int lo = self < other ? self : other, hi = self < other ? other : self;
  if (crypto_scalarmult(shared, sk_self, pk_other) != 0) {
    sodium_memzero(shared, sizeof shared);
    return RM_ERR_PROTOCOL; /* low-order point: the shared secret would be 0 */
  }
  rm__put_le64(hdr, job);
  rm__put_le64(hdr + 8, generation);
  rm__put_le32(hdr + 16, (uint32_t)lo);
  rm__put_le32(hdr + 20, (uint32_t)hi);
  crypto_generichash_init(&h, NULL, 0, 32);
  crypto_generichash_update(&h, (const uint8_t *)kdf_label, sizeof kdf_label - 1);
  crypto_generichash_update(&h, hdr, sizeof hdr);
  crypto_generichash_update(&h, shared, sizeof shared);
  crypto_generichash_update(&h, self == lo ? pk_self : pk_other, 32);
  crypto_generichash_update(&h, self == lo ? pk_other : pk_self, 32);
  crypto_generichash_final(&h, seed, 32);
  sodium_memzero(shared, sizeof shared);
  sodium_memzero(&h, sizeof h);
  return RM_OK;
}

/* ---- PRG fused with add/subtract ---- */

static void nonce_of(uint8_t nonce[12], uint64_t seq, uint32_t purpose)
{
  rm__put_le64(nonce, seq);
  rm__put_le32(nonce + 8, purpose);
}

static void add32(uint32_t *restrict l, const uint8_t *restrict ks, size_t m, int sign)
{
  if (sign > 0)
    for (size_t j = 0; j < m; j++) l[j] += rm__get_le32(ks + 4 * j);
  else
    for (size_t j = 0; j < m; j++) l[j] -= rm__get_le32(ks + 4 * j);
}

static void add64(uint64_t *restrict l, const uint8_t *restrict ks, size_t m, int sign)
{
  if (sign > 0)
    for (size_t j = 0; j < m; j++) l[j] += rm__get_le64(ks + 8 * j);
  else
    for (size_t j = 0; j < m; j++) l[j] -= rm__get_le64(ks + 8 * j);
}

void rm__secagg_prg_add(int bits, const uint8_t key[32], uint64_t seq, uint32_t purpose,
                        int sign, void *lanes, size_t first, size_t n)
{
  _Alignas(64) uint8_t ks[RM__SA_BLOCK];
  uint8_t nonce[12];
  size_t w = (size_t)bits / 8, per = RM__SA_BLOCK / w;
  nonce_of(nonce, seq, purpose);
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    uint32_t ic = (uint32_t)((first + i) * w / 64);
    rm__secagg_keystream(ks, m * w, nonce, ic, key);
    if (bits == 32) add32((uint32_t *)lanes + i, ks, m, sign);
    else add64((uint64_t *)lanes + i, ks, m, sign);
  }
  sodium_memzero(ks, sizeof ks);
}

void rm__secagg_mask_add(int bits, int rank, const int *nbr, int n_nbr,
                         const uint8_t (*seeds)[32], const uint8_t *self_seed, uint64_t seq,
                         uint32_t purpose, void *lanes, size_t first, size_t n)
{
  for (int j = 0; j < n_nbr; j++)
    rm__secagg_prg_add(bits, seeds[j], seq, purpose, nbr[j] > rank ? 1 : -1, lanes, first, n);
  if (self_seed != NULL) rm__secagg_prg_add(bits, self_seed, seq, RM__SA_SELF, 1, lanes, first, n);
}

/* ---- quantization ---- */

/* The 32-bit lanes' rounding, written so that the compiler vectorizes it
 * (floor, int32 conversions, compares: no 64-bit conversion, which AVX2
 * lacks), with 16-bit coins: half the keystream of 32-bit ones, and a
 * rounding bias under 2^-16 of a quantum (a quantum is 1 / scale, about
 * 1e-8 of the clip by default). Compiled twice, for AVX2 and for the
 * baseline, and picked once at run time: 16M lanes took 180 ms with 32-bit
 * coins and scalar code, 50 ms now (this machine). */
#define QUANT32_BODY                                                          \
  for (size_t j = 0; j < m; j++) {                                            \
    double v = (double)x[j] * fs;                                             \
    v = v > bound ? bound : v;                                                \
    v = v < -bound ? -bound : v;                                              \
    double fl = floor(v);                                                     \
    int32_t f = (int32_t)((v - fl) * 65536.0);                                \
    int32_t c = (int32_t)coin[j];                                             \
    out[j] = (uint32_t)((int32_t)fl + (c < f));                               \
  }

typedef void (*quant32_fn)(const float *restrict x, size_t m, double fs,
                           double bound, const uint16_t *restrict coin,
                           uint32_t *restrict out);

static void quant32_base(const float *restrict x, size_t m, double fs,
                         double bound, const uint16_t *restrict coin,
                         uint32_t *restrict out)
{
  QUANT32_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void
quant32_avx2(const float *restrict x, size_t m, double fs, double bound,
             const uint16_t *restrict coin, uint32_t *restrict out)
{
  QUANT32_BODY
}
#endif

static quant32_fn quant32_pick(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return quant32_avx2;
#endif
  return quant32_base;
}

void rm__secagg_quantize(int bits, const float *x, size_t n, double factor, double scale,
                         double bound, const uint8_t round_key[32], uint64_t seq, size_t first,
                         void *lanes)
{
  _Alignas(64) uint8_t ks[RM__SA_BLOCK];
  _Alignas(64) uint32_t coin[RM__SA_BLOCK / 4];
  _Alignas(64) uint16_t coin16[RM__SA_BLOCK / 4];
  uint8_t nonce[12];
  size_t per = RM__SA_BLOCK / 4;
  double fs = factor * scale;
  static quant32_fn q32; /* a benign race: every thread stores the same */
  if (!q32) q32 = quant32_pick();
  if (factor == 0) {
    memset(lanes, 0, n * (size_t)bits / 8);
    return;
  }
  nonce_of(nonce, seq, RM__SA_ROUND);
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    if (bits == 32) { /* 2 bytes of keystream per lane, from byte 2 * (first + i) */
      rm__secagg_keystream(ks, m * 2, nonce, (uint32_t)((first + i) / 32), round_key);
      for (size_t j = 0; j < m; j++) coin16[j] = (uint16_t)(ks[2 * j] | ks[2 * j + 1] << 8);
      q32(x + i, m, fs, bound, coin16, (uint32_t *)lanes + i);
      continue;
    }
    rm__secagg_keystream(ks, m * 4, nonce, (uint32_t)((first + i) / 16), round_key);
    for (size_t j = 0; j < m; j++) coin[j] = rm__get_le32(ks + 4 * j);
    for (size_t j = 0; j < m; j++) {
      double v = (double)x[i + j] * fs;
      v = v > bound ? bound : v < -bound ? -bound : v;
      /* floor and the coin in integers, without branches: the coin is a
       * fair one for fractions near 1/2, which a branch would mispredict
       * half the time (|v| <= bound < 2^62, so the conversions are exact) */
      int64_t q = (int64_t)v;
      q -= (int64_t)((double)q > v);
      uint64_t thr = (uint64_t)((v - (double)q) * 4294967296.0); /* frac, 32 bits */
      q += (int64_t)((uint64_t)coin[j] < thr);
      ((uint64_t *)lanes)[i + j] = (uint64_t)q;
    }
  }
  sodium_memzero(ks, sizeof ks);
  sodium_memzero(coin, sizeof coin);
  sodium_memzero(coin16, sizeof coin16);
}

/* The unmasked sum back to floats: the int32 -> double -> float loop
 * vectorizes like quant32 (picked the same way). */
#define DEQUANT32_BODY                                                        \
  for (size_t j = 0; j < n; j++) out[j] = (float)((double)(int32_t)l[j] * inv);

typedef void (*dequant32_fn)(const uint32_t *restrict l, size_t n, double inv,
                             float *restrict out);

static void dequant32_base(const uint32_t *restrict l, size_t n, double inv,
                           float *restrict out)
{
  DEQUANT32_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void
dequant32_avx2(const uint32_t *restrict l, size_t n, double inv, float *restrict out)
{
  DEQUANT32_BODY
}
#endif

void rm__secagg_dequantize(int bits, const void *lanes, size_t n, double scale, float *out)
{
  static dequant32_fn d32; /* a benign race: every thread stores the same */
  double inv = 1.0 / scale;
  if (!d32) {
    d32 = dequant32_base;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) d32 = dequant32_avx2;
#endif
  }
  if (bits == 32) {
    d32(lanes, n, inv, out);
    return;
  }
  for (size_t j = 0; j < n; j++)
    out[j] = (float)((double)(int64_t)((const uint64_t *)lanes)[j] * inv);
}
