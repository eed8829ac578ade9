/*
 * secagg_chacha.c - the ChaCha20-IETF keystream (RFC 8439) of secure
 * aggregation's PRG (secagg_math.c), 16 blocks at a time with AVX-512F.
 *
 * WHY. The keystreams are most of a secure call's CPU time (secagg.c, COST).
 * libsodium 1.0.18's fastest ChaCha20 is 8 blocks wide in AVX2, where a
 * rotation is two shifts and an OR (or a byte shuffle); AVX-512F rotates
 * in one instruction (vprold) and holds 16 blocks, one per 32-bit lane.
 *
 * WHAT. rm__secagg_keystream writes exactly the bytes of
 * crypto_stream_chacha20_ietf_xor_ic over zeros: same key, nonce, block
 * counter, the same 20 rounds - so the PRG, and every mask on the wire, is
 * unchanged (tests/secagg/test_secagg_unit.c compares the two, byte for
 * byte, at many lengths and counters). Layout: state word k of the 16
 * blocks is one vector (lane i = block ic + i); after the rounds the 16 x
 * 16 words are transposed in registers to the blocks' byte order
 * (transpose_store). What is not a whole group of 16 blocks, and any CPU without
 * AVX-512F, goes to libsodium. ChaCha is add/rotate/xor only: no table, no
 * branch on secret data, constant time in either path.
 */
#include <string.h>

#include <sodium.h>

#include "rm_le.h"
#include "secagg/secagg_int.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RM_SA_CHACHA16 1

#define QR(a, b, c, d)                                                        \
  do {                                                                        \
    a = _mm512_add_epi32(a, b); d = _mm512_xor_si512(d, a);                    \
    d = _mm512_rol_epi32(d, 16);                                              \
    c = _mm512_add_epi32(c, d); b = _mm512_xor_si512(b, c);                    \
    b = _mm512_rol_epi32(b, 12);                                              \
    a = _mm512_add_epi32(a, b); d = _mm512_xor_si512(d, a);                    \
    d = _mm512_rol_epi32(d, 8);                                               \
    c = _mm512_add_epi32(c, d); b = _mm512_xor_si512(b, c);                    \
    b = _mm512_rol_epi32(b, 7);                                               \
  } while (0)

/* x[k] holds word k of 16 blocks (lane i: block i); out gets the blocks in
 * order, 64 bytes each. Per 4 words: 32-bit then 64-bit interleaves leave,
 * in 128-bit lane j of t[m], words 4q..4q+3 of block 4j + m; two rounds of
 * 128-bit lane shuffles (0x88: lanes 0, 2 of each; 0xdd: lanes 1, 3) put
 * the 4 quarters of a block side by side. x86 stores little-endian: the
 * RFC's byte order. */
__attribute__((target("avx512f"))) static void transpose_store(uint8_t *out, __m512i x[16])
{
  __m512i t[4][4]; /* t[q][m] */
  for (int q = 0; q < 4; q++) {
    __m512i a = x[4 * q], b = x[4 * q + 1], c = x[4 * q + 2], d = x[4 * q + 3];
    __m512i ab0 = _mm512_unpacklo_epi32(a, b), ab1 = _mm512_unpackhi_epi32(a, b);
    __m512i cd0 = _mm512_unpacklo_epi32(c, d), cd1 = _mm512_unpackhi_epi32(c, d);
    t[q][0] = _mm512_unpacklo_epi64(ab0, cd0);
    t[q][1] = _mm512_unpackhi_epi64(ab0, cd0);
    t[q][2] = _mm512_unpacklo_epi64(ab1, cd1);
    t[q][3] = _mm512_unpackhi_epi64(ab1, cd1);
  }
  for (int m = 0; m < 4; m++) {
    __m512i p = _mm512_shuffle_i32x4(t[0][m], t[1][m], 0x88); /* u0 u2 v0 v2 */
    __m512i q = _mm512_shuffle_i32x4(t[0][m], t[1][m], 0xdd); /* u1 u3 v1 v3 */
    __m512i r = _mm512_shuffle_i32x4(t[2][m], t[3][m], 0x88); /* w0 w2 z0 z2 */
    __m512i s = _mm512_shuffle_i32x4(t[2][m], t[3][m], 0xdd); /* w1 w3 z1 z3 */
    _mm512_storeu_si512((void *)(out + 64 * (0 + m)), _mm512_shuffle_i32x4(p, r, 0x88));
    _mm512_storeu_si512((void *)(out + 64 * (8 + m)), _mm512_shuffle_i32x4(p, r, 0xdd));
    _mm512_storeu_si512((void *)(out + 64 * (4 + m)), _mm512_shuffle_i32x4(q, s, 0x88));
    _mm512_storeu_si512((void *)(out + 64 * (12 + m)), _mm512_shuffle_i32x4(q, s, 0xdd));
  }
}

/* groups x 1024 bytes of keystream from block counter ic */
__attribute__((target("avx512f"))) static void chacha16(uint8_t *out, size_t groups,
                                                        const uint32_t in[16], uint32_t ic)
{
  __m512i s[16];
  for (int k = 0; k < 16; k++) s[k] = _mm512_set1_epi32((int)in[k]);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (size_t gi = 0; gi < groups; gi++, ic += 16, out += 1024) {
    s[12] = _mm512_add_epi32(_mm512_set1_epi32((int)ic), lanes);
    __m512i x0 = s[0], x1 = s[1], x2 = s[2], x3 = s[3], x4 = s[4], x5 = s[5], x6 = s[6],
            x7 = s[7], x8 = s[8], x9 = s[9], x10 = s[10], x11 = s[11], x12 = s[12],
            x13 = s[13], x14 = s[14], x15 = s[15];
    for (int r = 0; r < 10; r++) {
      QR(x0, x4, x8, x12);
      QR(x1, x5, x9, x13);
      QR(x2, x6, x10, x14);
      QR(x3, x7, x11, x15);
      QR(x0, x5, x10, x15);
      QR(x1, x6, x11, x12);
      QR(x2, x7, x8, x13);
      QR(x3, x4, x9, x14);
    }
    __m512i x[16] = {x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15};
    for (int k = 0; k < 16; k++) x[k] = _mm512_add_epi32(x[k], s[k]);
    transpose_store(out, x);
  }
}

static int have_avx512f(void)
{
  static int v = -1; /* a benign race: every thread stores the same */
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  return v;
}
#endif

static const uint8_t zeros[RM__SA_BLOCK];

void rm__secagg_keystream(uint8_t *out, size_t len, const uint8_t nonce[12], uint32_t ic,
                          const uint8_t key[32])
{
#ifdef RM_SA_CHACHA16
  if (len >= 1024 && have_avx512f()) {
    uint32_t in[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574}; /* "expand 32-byte k" */
    for (int k = 0; k < 8; k++) in[4 + k] = rm__get_le32(key + 4 * k);
    for (int k = 0; k < 3; k++) in[13 + k] = rm__get_le32(nonce + 4 * k);
    size_t groups = len / 1024;
    chacha16(out, groups, in, ic);
    sodium_memzero(in, sizeof in);
    out += groups * 1024;
    len -= groups * 1024;
    ic += (uint32_t)(groups * 16);
  }
#endif
  while (len > 0) { /* libsodium XORs its keystream into zeros: the keystream */
    size_t m = len < sizeof zeros ? len : sizeof zeros;
    crypto_stream_chacha20_ietf_xor_ic(out, zeros, m, nonce, ic, key);
    out += m;
    len -= m;
    ic += (uint32_t)(m / 64);
  }
}
