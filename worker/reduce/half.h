/*
 * half.h - branch-free f16 / bf16 <-> f32 conversions, inline so the kernel
 * loops in reduce_half.c can vectorise them (no table, no call, no branch:
 * every choice is a select the vectoriser turns into a blend).
 *
 * f16 -> f32 (exact): the half's exponent+mantissa are shifted into f32
 *   position and the exponent is re-biased by a multiply by 2^-112; the
 *   subnormal halves are built as (0.5 + m * 2^-24) - 0.5 with one exact
 *   subtraction. Inf/NaN come out as inf/NaN.
 * f32 -> f16 (round to nearest even, IEEE): the value is scaled so that its
 *   f16 rounding point falls on the f32 rounding point of an addition with a
 *   power of two (`bias`), so the FPU's own round-to-nearest-even does the
 *   rounding; overflow goes to inf exactly when the rounded value exceeds
 *   65504, NaN stays NaN (quiet, 0x7E00).
 * bf16 <-> f32: bf16 is the top half of an f32; rounding adds 0x7FFF plus the
 *   lowest kept bit (ties to even); NaN is kept quiet.
 *
 * These are exact in the sense tested by tests/collectives/test_reduce.c
 * (all 65536 halves round-trip; f32 -> f16 agrees with the compiler's own
 * _Float16 conversion on every tested value, ties included).
 */
#ifndef RM_WORKER_REDUCE_HALF_H
#define RM_WORKER_REDUCE_HALF_H

#include <stdint.h>
#include <string.h>

static inline float rm__bits_f32(uint32_t w)
{
  float f;
  memcpy(&f, &w, sizeof f);
  return f;
}

static inline uint32_t rm__f32_bits(float f)
{
  uint32_t w;
  memcpy(&w, &f, sizeof w);
  return w;
}

/* cond ? a : b on bit patterns, as a mask (keeps the loops branch-free even
 * where gcc would not if-convert a float-derived select) */
static inline uint32_t rm__sel(uint32_t cond, uint32_t a, uint32_t b)
{
  uint32_t m = 0u - cond;
  return (a & m) | (b & ~m);
}

static inline float rm__h2f(uint16_t h)
{
  uint32_t w = (uint32_t)h << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t two_w = w + w;
  float norm = rm__bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  float denorm = rm__bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
  uint32_t mag = rm__sel(two_w < (1u << 27), rm__f32_bits(denorm), rm__f32_bits(norm));
  return rm__bits_f32(sign | mag);
}

static inline uint16_t rm__f2h(float f)
{
  float a = rm__bits_f32(rm__f32_bits(f) & 0x7FFFFFFFu);
  float base = (a * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t w = rm__f32_bits(f);
  uint32_t shl1_w = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = rm__sel(bias < 0x71000000u, 0x71000000u, bias);
  base = rm__bits_f32((bias >> 1) + 0x07800000u) + base;
  uint32_t bits = rm__f32_bits(base);
  uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  uint32_t mant_bits = bits & 0x00000FFFu;
  uint32_t nonsign = exp_bits + mant_bits;
  return (uint16_t)((sign >> 16) | rm__sel(shl1_w > 0xFF000000u, 0x7E00u, nonsign));
}

static inline float rm__b2f(uint16_t h) { return rm__bits_f32((uint32_t)h << 16); }

static inline uint16_t rm__f2b(float f)
{
  uint32_t w = rm__f32_bits(f);
  uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  uint32_t quiet = (w >> 16) | 0x40u;
  return (uint16_t)rm__sel((w & 0x7FFFFFFFu) > 0x7F800000u, quiet, rounded);
}

#endif
