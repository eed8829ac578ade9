/*
 * reduce_half.c - f16 and bf16 kernels: widen both operands to f32 (exact),
 * combine in f32, round back to nearest-even once (half.h). The f32
 * intermediate cannot overflow for two halves, so a sum is inf only when the
 * correctly rounded result of that step is (e.g. 65504 + 8 stays 65504 in
 * f16; 65504 + 32 is inf because the true sum rounds past the top).
 * min/max compare the widened values, so -0/+0 and NaN behave as in f32.
 *
 * Note for multi-step reductions: each pairwise step rounds, as every
 * half-precision all-reduce does (NCCL, Gloo); inputs that are small
 * integers stay exact (see tests/collectives).
 */
#include <stdint.h>

#include "reduce/half.h"
#include "reduce/reduce.h"
#include "reduce/reduce_int.h"

#define RM__HKERNEL(name, TO, FROM, EXPR)                                     \
  void name(void *dstv, const void *srcv, size_t n)                           \
  {                                                                           \
    uint16_t *restrict d = (uint16_t *)dstv;                                  \
    const uint16_t *restrict s = (const uint16_t *)srcv;                      \
    for (size_t i = 0; i < n; i++) {                                          \
      float a = FROM(d[i]), b = FROM(s[i]);                                   \
      d[i] = TO(EXPR);                                                        \
    }                                                                         \
  }

RM__HKERNEL(rm__sum_f16, rm__f2h, rm__h2f, a + b)
RM__HKERNEL(rm__prod_f16, rm__f2h, rm__h2f, a * b)
RM__HKERNEL(rm__min_f16, rm__f2h, rm__h2f, b < a ? b : a)
RM__HKERNEL(rm__max_f16, rm__f2h, rm__h2f, b > a ? b : a)
RM__HKERNEL(rm__sum_bf16, rm__f2b, rm__b2f, a + b)
RM__HKERNEL(rm__prod_bf16, rm__f2b, rm__b2f, a * b)
RM__HKERNEL(rm__min_bf16, rm__f2b, rm__b2f, b < a ? b : a)
RM__HKERNEL(rm__max_bf16, rm__f2b, rm__b2f, b > a ? b : a)

void rm__div_f16(void *buf, size_t n, int world)
{
  uint16_t *restrict p = (uint16_t *)buf;
  float w = (float)world;
  for (size_t i = 0; i < n; i++)
    p[i] = rm__f2h(rm__h2f(p[i]) / w);
}

void rm__div_bf16(void *buf, size_t n, int world)
{
  uint16_t *restrict p = (uint16_t *)buf;
  float w = (float)world;
  for (size_t i = 0; i < n; i++)
    p[i] = rm__f2b(rm__b2f(p[i]) / w);
}

float rm__f16_to_f32(unsigned short h) { return rm__h2f(h); }
unsigned short rm__f32_to_f16(float f) { return rm__f2h(f); }
float rm__bf16_to_f32(unsigned short h) { return rm__b2f(h); }
unsigned short rm__f32_to_bf16(float f) { return rm__f2b(f); }
