/*
 * secagg_int.h - secure aggregation, module-private tier: the pieces of
 * secagg_math.c that secagg.c fuses into its rounds, exposed so that
 * tests/secagg/test_secagg_unit.c can check them without a communicator.
 *
 * Lanes: a vector of `bits`-bit integers (uint32_t for 32, uint64_t for 64)
 * in host order, read as two's complement in Z_{2^bits}. Every function
 * below is pure (no globals; sodium_init must have run once, see
 * rm__secagg_sodium) and thread-safe.
 */
#ifndef RM_WORKER_SECAGG_SECAGG_INT_H
#define RM_WORKER_SECAGG_SECAGG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

/* PRG purposes: the last 4 bytes of the ChaCha20 nonce. */
enum {
  RM__SA_PAIR = 0,    /* pairwise mask PRG(s_uv, seq) */
  RM__SA_SELF = 1,    /* self-mask PRG(b_u, seq) */
  RM__SA_ROUND = 2,   /* stochastic-rounding coins PRG(round_key, seq) */
  RM__SA_CONFIRM = 3, /* CONFIRM's lanes, seq = UINT64_MAX */
  RM__SA_PERM = 4,    /* the "log" graph's permutation, key = perm seed */
  RM__SA_GATHER = 5   /* the sharded UNMASK's all-gather, key = first guard's b */
};

/* Keystream is made and consumed in blocks of this many bytes: the mask
 * loop keeps one block of lanes, one of keystream and one of input hot in
 * L1/L2 while it walks the neighbours. A multiple of 64 (ChaCha block). */
#define RM__SA_BLOCK 16384

/* Most bytes one (key, nonce) stream may cover: the IETF block counter is
 * 32 bits of 64-byte blocks. Bounds count * lane bytes of one call. */
#define RM__SA_STREAM_MAX ((uint64_t)64 << 32)

/* sodium_init() once per process (thread-safe). RM_OK or RM_ERR_INTERNAL. */
rm_status_t rm__secagg_sodium(void);

/* out[0..len) = the ChaCha20-IETF keystream (RFC 8439) of key and nonce
 * from block counter ic: the bytes crypto_stream_chacha20_ietf_xor_ic
 * writes over zeros (secagg_chacha.c: AVX-512F where the CPU has it).
 * (ic + len / 64) must not pass 2^32. */
void rm__secagg_keystream(uint8_t *out, size_t len, const uint8_t nonce[12],
                          uint32_t ic, const uint8_t key[32]);

/* lanes[i] += sign * PRG(key; seq, purpose)[first + i] (mod 2^bits) for i
 * in [0, n); sign is +1 or -1. The PRG is ChaCha20-IETF keyed by `key`,
 * nonce seq (u64 LE) || purpose (u32 LE); lane j is keystream bytes
 * [j*bits/8, (j+1)*bits/8) read little-endian. `first` must be a multiple
 * of 512 / bits (lanes per 64-byte ChaCha block), and (first + n) * bits/8
 * <= RM__SA_STREAM_MAX. */
void rm__secagg_prg_add(int bits, const uint8_t key[32], uint64_t seq,
                        uint32_t purpose, int sign, void *lanes, size_t first,
                        size_t n);

/* A rank's whole mask on lanes[0..n) (positions first..first+n of the
 * vector): the pairwise masks with its n_nbr neighbours (+ toward a higher
 * rank, - toward a lower one; seeds[j] is s_{rank, nbr[j]}) and, when
 * self_seed is not NULL, the self-mask. Added to what lanes holds. */
void rm__secagg_mask_add(int bits, int rank, const int *nbr, int n_nbr,
                         const uint8_t (*seeds)[32], const uint8_t *self_seed,
                         uint64_t seq, uint32_t purpose, void *lanes,
                         size_t first, size_t n);

/* Stochastic rounding of x[0..n) * factor * scale into lanes (positions
 * first.. of the vector, for the coins): v clamped to [-bound, bound]
 * (bound < 2^62), q = floor(v) + [coin < frac(v)], coin a u32 of
 * PRG(round_key; seq, RM__SA_ROUND) and frac(v) cut to 32 bits. factor 0
 * writes zeros. `first` a multiple of 32. 32-bit lanes draw 16-bit coins
 * (bytes 2 first.. of the stream), 64-bit lanes 32-bit ones. */
void rm__secagg_quantize(int bits, const float *x, size_t n, double factor,
                         double scale, double bound,
                         const uint8_t round_key[32], uint64_t seq,
                         size_t first, void *lanes);

/* out[i] = (float)(lane i read as a two's complement integer / scale). */
void rm__secagg_dequantize(int bits, const void *lanes, size_t n, double scale,
                           float *out);

/* The pairwise seed s_uv (both ends compute the same bytes):
 * BLAKE2b-256("ringmaster-secagg-v1" || job u64 LE || generation u64 LE ||
 * min(u,v) u32 LE || max(u,v) u32 LE || X25519(sk_self, pk_other) ||
 * pk_min || pk_max). RM_ERR_PROTOCOL when the scalar multiplication fails
 * (pk_other is a low-order point). OUT seed only on RM_OK. */
rm_status_t rm__secagg_seed(uint64_t job, uint64_t generation, int self,
                            int other, const uint8_t sk_self[32],
                            const uint8_t pk_self[32],
                            const uint8_t pk_other[32], uint8_t seed[32]);

/* The "log" graph's degree for world members: min(world - 1,
 * 2 ceil(log2 world)); "all": world - 1. */
int rm__secagg_degree(int world, int neighbours_log);
/* How many ranks add a self-mask: min(world, max(2, min(threshold,
 * degree + 1))). */
int rm__secagg_nguards(int world, int neighbours_log, int threshold);
/* OUT guard[0..world): 1 for the ranks that add a self-mask (see
 * rm__secagg_graph in secagg.h); scratch holds world ints. */
void rm__secagg_guards(int world, int neighbours_log, int threshold,
                       const uint8_t perm_seed[32], int *scratch,
                       uint8_t *guard);
/* OUT perm[0..world): the rank at each position of the "log" graph's
 * circle, a Fisher-Yates shuffle driven by PRG(perm_seed; 0, RM__SA_PERM)
 * (u32 draws, rejection sampled: uniform). */
void rm__secagg_perm(int world, const uint8_t perm_seed[32], int *perm);

#endif
