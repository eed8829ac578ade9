/*
 * test_reduce.c - unit tests of the reduction kernels (worker/reduce/).
 *
 *  1. f16 -> f32 is exact for all 65536 halves, and f32 -> f16 -> f32
 *     round-trips every non-NaN half; f32 -> f16 agrees with a slow
 *     reference (double arithmetic, rint = round-to-nearest-even) on every
 *     half, every midpoint between neighbouring halves, and 2^20 random
 *     floats. Same for bf16.
 *  2. every (dtype, op) kernel over lengths 0..67 (vector bodies and tails)
 *     equals a scalar reference computed in double and rounded once.
 *  3. overflow: f16 65504 + 8 stays 65504, 65504 + 16 is inf (tie to even
 *     past the top), 256 * 256 is inf; bf16 likewise at its top; integer
 *     sums wrap.
 *  4. rm__scale_avg: integers truncate toward zero, floats divide once.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"

static int failures;
#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      failures++;                                                             \
      if (failures < 20) {                                                    \
        fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond);       \
        fprintf(stderr, __VA_ARGS__);                                         \
        fputc('\n', stderr);                                                  \
      }                                                                       \
    }                                                                         \
  } while (0)

static uint32_t rng = 12345u;
static uint32_t next_u32(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static float bits_f(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
static uint32_t f_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }

/* Reference: round a double to a binary format with `mbits` stored mantissa
 * bits and exponent range [emin, emax], to nearest even. Returns the bits. */
static uint16_t ref_round(double x, int mbits, int ebits)
{
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias, emax = bias;
  uint16_t sign = signbit(x) ? (uint16_t)(1u << (mbits + ebits)) : 0;
  uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
  double a = fabs(x);
  if (isnan(x))
    return 0xFFFF;
  if (isinf(a))
    return sign | inf;
  int e;
  (void)frexp(a, &e);
  e -= 1; /* a in [2^e, 2^(e+1)) */
  if (a == 0 || e < emin)
    e = emin;
  double q = rint(ldexp(a, mbits - e)); /* exact scaling, RNE */
  if (q >= ldexp(1.0, mbits + 1)) {
    q /= 2;
    e++;
  }
  if (e > emax)
    return sign | inf;
  if (q < ldexp(1.0, mbits)) /* subnormal or zero */
    return sign | (uint16_t)q;
  return sign | (uint16_t)(((unsigned)(e + bias) << mbits) |
                           ((unsigned)q - (1u << mbits)));
}
static uint16_t ref_f16(double x) { return ref_round(x, 10, 5); }
static uint16_t ref_bf16(double x) { return ref_round(x, 7, 8); }

static int is_nan16(uint16_t h, int bf)
{
  return bf ? (h & 0x7F80) == 0x7F80 && (h & 0x7F)
            : (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
}

static void check_convert(int bf)
{
  float (*to32)(unsigned short) = bf ? rm__bf16_to_f32 : rm__f16_to_f32;
  unsigned short (*to16)(float) = bf ? rm__f32_to_bf16 : rm__f32_to_f16;
  uint16_t (*ref)(double) = bf ? ref_bf16 : ref_f16;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = to32((unsigned short)h);
    if (is_nan16((uint16_t)h, bf)) {
      EXPECT(isnan(f), "bf=%d h=%04x", bf, h);
      EXPECT(is_nan16(to16(f), bf), "bf=%d nan h=%04x", bf, h);
      continue;
    }
    EXPECT(ref(f) == h, "bf=%d h=%04x -> %g is not exact", bf, h, f);
    EXPECT(to16(f) == h, "bf=%d round trip h=%04x -> %04x", bf, h, to16(f));
    /* midpoint to the next half up (same sign): ties go to even */
    if ((h & 0x7FFF) < (bf ? 0x7F80u : 0x7C00u) - 1) {
      double mid = ((double)f + (double)to32((unsigned short)(h + 1))) / 2;
      EXPECT(to16((float)mid) == ref(mid), "bf=%d mid above %04x: %04x vs %04x",
             bf, h, to16((float)mid), ref(mid));
    }
  }
  for (int i = 0; i < (1 << 20); i++) {
    float f = bits_f(next_u32());
    if (isnan(f))
      continue;
    EXPECT(to16(f) == ref(f), "bf=%d f=%a (%08x): %04x vs ref %04x", bf, f,
           f_bits(f), to16(f), ref(f));
  }
}

/* Random input value for a dtype, as a double (exact in the dtype). */
static double rand_val(rm_dtype_t dt)
{
  int32_t r = (int32_t)(next_u32() % 2001) - 1000;
  switch (dt) {
  case RM_F32: case RM_F64: return r / 8.0;
  case RM_F16: return rm__f16_to_f32(rm__f32_to_f16((float)(r / 16.0)));
  case RM_BF16: return rm__bf16_to_f32(rm__f32_to_bf16((float)(r / 16.0)));
  case RM_U8: return (double)(next_u32() & 0xFF);
  default: return (double)r;
  }
}

static void store(void *buf, size_t i, rm_dtype_t dt, double v)
{
  switch (dt) {
  case RM_F32: ((float *)buf)[i] = (float)v; break;
  case RM_F64: ((double *)buf)[i] = v; break;
  case RM_F16: ((uint16_t *)buf)[i] = ref_f16(v); break;
  case RM_BF16: ((uint16_t *)buf)[i] = ref_bf16(v); break;
  case RM_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case RM_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case RM_U8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
  default: break;
  }
}

static double combine(rm_op_t op, double a, double b)
{
  switch (op) {
  case RM_SUM: case RM_AVG: return a + b;
  case RM_PROD: return a * b;
  case RM_MIN: return b < a ? b : a;
  default: return b > a ? b : a;
  }
}

static void check_kernels(void)
{
  unsigned char a[67 * 8], b[67 * 8], want[67 * 8];
  for (int dt = 0; dt < RM_DTYPE_COUNT; dt++) {
    size_t esz = dt == RM_F64 || dt == RM_I64 ? 8 : dt == RM_U8 ? 1
               : dt == RM_F16 || dt == RM_BF16 ? 2 : 4;
    for (int op = 0; op < RM_OP_COUNT; op++) {
      rm__reduce_fn_t fn = rm__reduce_fn((rm_dtype_t)dt, (rm_op_t)op);
      EXPECT(fn != NULL, "dt %d op %d", dt, op);
      if (!fn)
        continue;
      for (size_t n = 0; n <= 67; n++) {
        for (size_t i = 0; i < n; i++) {
          double x = rand_val((rm_dtype_t)dt), y = rand_val((rm_dtype_t)dt);
          double r = combine((rm_op_t)op, x, y);
          if (dt == RM_U8) r = (double)((uint8_t)(int64_t)r);
          store(a, i, (rm_dtype_t)dt, x);
          store(b, i, (rm_dtype_t)dt, y);
          store(want, i, (rm_dtype_t)dt, r);
        }
        fn(a, b, n);
        EXPECT(memcmp(a, want, n * esz) == 0, "dtype %d op %d n %zu", dt, op, n);
      }
    }
  }
  EXPECT(rm__reduce_fn(RM_DTYPE_COUNT, RM_SUM) == NULL, "bad dtype");
  EXPECT(rm__reduce_fn(RM_F32, RM_OP_COUNT) == NULL, "bad op");
}

static void check_overflow(void)
{
  uint16_t d[4], s[4];
  d[0] = 0x7BFF; s[0] = rm__f32_to_f16(8.0f);    /* 65504 + 8 */
  d[1] = 0x7BFF; s[1] = rm__f32_to_f16(16.0f);   /* 65504 + 16: tie -> inf */
  d[2] = 0xFBFF; s[2] = 0x7BFF;                  /* -65504 + 65504 = 0 */
  d[3] = 0x7BFF; s[3] = rm__f32_to_f16(-1.0f);   /* 65503 -> 65504 */
  rm__reduce_fn(RM_F16, RM_SUM)(d, s, 4);
  EXPECT(d[0] == 0x7BFF, "65504+8 = %04x", d[0]);
  EXPECT(d[1] == 0x7C00, "65504+16 = %04x", d[1]);
  EXPECT(d[2] == 0x0000, "-65504+65504 = %04x", d[2]);
  EXPECT(d[3] == 0x7BFF, "65504-1 = %04x", d[3]);
  d[0] = rm__f32_to_f16(256.0f); s[0] = d[0];
  d[1] = rm__f32_to_f16(255.0f); s[1] = rm__f32_to_f16(256.0f);
  rm__reduce_fn(RM_F16, RM_PROD)(d, s, 2);
  EXPECT(d[0] == 0x7C00, "256*256 = %04x", d[0]);
  EXPECT(d[1] == 0x7BF8, "255*256 = %04x (65280)", d[1]);
  d[0] = 0x7F7F; s[0] = 0x7F7F; /* bf16 max + max -> inf, truthfully */
  d[1] = 0x7F7F; s[1] = rm__f32_to_bf16(1.0f); /* max + 1 stays max */
  rm__reduce_fn(RM_BF16, RM_SUM)(d, s, 2);
  EXPECT(d[0] == 0x7F80, "bf16 max+max = %04x", d[0]);
  EXPECT(d[1] == 0x7F7F, "bf16 max+1 = %04x", d[1]);
  int32_t i[1] = {INT32_MAX}, j[1] = {1};
  rm__reduce_fn(RM_I32, RM_SUM)(i, j, 1);
  EXPECT(i[0] == INT32_MIN, "i32 wraps: %d", i[0]);
  uint8_t u[1] = {200}, v[1] = {100};
  rm__reduce_fn(RM_U8, RM_SUM)(u, v, 1);
  EXPECT(u[0] == 44, "u8 wraps: %d", u[0]);
}

static void check_avg(void)
{
  int32_t i[3] = {-7, 7, 9};
  rm__scale_avg(i, 3, RM_I32, 2);
  EXPECT(i[0] == -3 && i[1] == 3 && i[2] == 4, "i32 avg %d %d %d", i[0], i[1], i[2]);
  int64_t l[2] = {-9, 1000000000000LL};
  rm__scale_avg(l, 2, RM_I64, 4);
  EXPECT(l[0] == -2 && l[1] == 250000000000LL, "i64 avg");
  uint8_t u[2] = {255, 3};
  rm__scale_avg(u, 2, RM_U8, 4);
  EXPECT(u[0] == 63 && u[1] == 0, "u8 avg %d %d", u[0], u[1]);
  float f[2] = {1.0f, 7.0f};
  rm__scale_avg(f, 2, RM_F32, 3);
  EXPECT(f[0] == 1.0f / 3.0f && f[1] == 7.0f / 3.0f, "f32 avg");
  double g[1] = {10.0};
  rm__scale_avg(g, 1, RM_F64, 4);
  EXPECT(g[0] == 2.5, "f64 avg");
  uint16_t h[2] = {rm__f32_to_f16(7.0f), rm__f32_to_bf16(7.0f)};
  rm__scale_avg(h, 1, RM_F16, 3);
  rm__scale_avg(h + 1, 1, RM_BF16, 3);
  EXPECT(h[0] == ref_f16(7.0 / 3.0), "f16 avg %04x", h[0]);
  EXPECT(h[1] == ref_bf16(7.0 / 3.0), "bf16 avg %04x", h[1]);
  int32_t one[1] = {5};
  rm__scale_avg(one, 1, RM_I32, 1);
  EXPECT(one[0] == 5, "world 1 is a no-op");
}

int main(void)
{
  check_convert(0);
  check_convert(1);
  check_kernels();
  check_overflow();
  check_avg();
  if (failures) {
    fprintf(stderr, "test_reduce: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_reduce: ok\n");
  return 0;
}
