/*
 * secagg.h - secure aggregation: pairwise-masked all-reduce of clipped,
 * fixed-point gradients, so that no worker and not the coordinator ever sees
 * an individual gradient (module tier; internal rm__ names).
 *
 * The protocol, its rounds, invariants and the security argument are written
 * at the top of secagg.c. In short, per generation (membership) of a job:
 *
 *   KEYS     every member makes an X25519 key pair (libsodium) and posts its
 *            public key through the RELAY (the coordinator, a barrier with
 *            payloads); every pair (u, v) derives a 256-bit seed s_uv with a
 *            KDF bound to job, generation and both ranks.
 *   CONFIRM  one tiny all-reduce of pairwise masks alone: it must sum to 0,
 *            else a public key was substituted or corrupted (RM_ERR_PROTOCOL).
 * and per call (seq = 0, 1, 2, ... within the generation):
 *   MASK     clip, quantize with stochastic rounding to Z_{2^bits}, add
 *            pairwise masks PRG(s_uv, seq) (+ for v > u, - for v < u; over
 *            the neighbour graph) and, on guard ranks, a self-mask PRG(b_u).
 *   REDUCE   ringmaster's own rm_allreduce over I32 / I64 SUM (wrap-around),
 *            any algorithm: every rank ends with the full masked sum.
 *   OPEN     every member posts its self-mask seed b_u through the RELAY; the
 *            relay answers only when every member has posted, i.e. when
 *            every member holds the full masked sum (the commit point).
 *   UNMASK   subtract the guards' self-masks, dequantize.
 * A member lost before OPEN released: nobody can unmask this call's sum; the
 * survivors re-form (next generation: fresh keys) and redo it. Lost after:
 * every survivor already has the sum, and the caller must NOT redo the call
 * (a redo without the lost member would reveal its input as the difference).
 *
 * Relay names: "secagg/keys" (44-byte payloads) and "secagg/open/<seq>"
 * (40 bytes); formats at the top of secagg.c. Module-private pieces (PRG,
 * KDF, quantizer, the guard set) for white-box tests: secagg_int.h.
 *
 * PRG: ChaCha20 (IETF) keyed by the seed, nonce = seq (8 bytes LE) || purpose
 * (4 bytes LE: 0 pairwise, 1 self-mask, 2 rounding, 3 confirm). A mask is
 * never reused: a new generation has new keys, a new call a new seq.
 */
#ifndef RM_WORKER_SECAGG_SECAGG_H
#define RM_WORKER_SECAGG_SECAGG_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

/* The coordinator's part, as the protocol needs it: an all-gather of small
 * messages through a third party. Collective over the communicator's
 * members: every member posts `len` bytes under `name` (<= 63 bytes); the
 * call returns when every member has posted, with all[r * len .. + len) =
 * member r's bytes in rank order. Errors: the relay's status (RM_ERR_TIMEOUT
 * with the missing ranks in words, RM_ERR_RECONFIGURED, RM_ERR_JOB_ENDED, ...)
 * and words in err. Must not return before every member posted. */
typedef struct rm__secagg_relay {
  void *ctx;
  rm_status_t (*exchange)(void *ctx, const char *name, const void *mine,
                          size_t len, void *all, char *err, size_t errlen);
} rm__secagg_relay_t;

typedef struct rm__secagg_params {
  int bits;           /* 32 or 64: the ring Z_{2^bits} (lanes I32 / I64) */
  double clip;        /* per-member L2 clip, > 0 */
  double scale;       /* fixed point: q = round(x * scale); 0 = default */
  int threshold;      /* refuse a sum over fewer members; >= 2 */
  int neighbours_log; /* 0: mask with every other member; 1: SecAgg+ graph */
  uint64_t job_id, generation; /* bound into every seed */
} rm__secagg_params_t;

/* Default scale for `world` members: the largest power of two with
 * world * (clip * scale + 1) <= 2^(bits - 2). */
double rm__secagg_default_scale(int bits, double clip, int world);
/* Do the parameters hold for `world` members? RM_OK, or RM_ERR_INVALID_ARG
 * with words in why ("32 bits cannot hold 9 x (clip 1 x scale 2^31 + 1)").
 * Checks bits, clip, scale (0 = default), threshold <= world. */
rm_status_t rm__secagg_check(const rm__secagg_params_t *p, int world,
                             char *why, size_t whylen);

/* The neighbour graph: OUT nbr[0..*n) = ranks u masks with (ascending),
 * *guard = 1 when u adds a self-mask. "all": every other rank. "log":
 * circulant graph of even degree k = min(world - 1, 2 ceil(log2 world)) on
 * positions of a permutation seeded by perm_seed (32 bytes: every member
 * derives it from the key transcript). Guards: the ranks at the first g
 * positions of that permutation, g = min(world, max(2, min(threshold,
 * k + 1))) (secagg_int.h rm__secagg_nguards): a coalition of fewer than g
 * members never holds every guard's seed before OPEN. nbr holds world
 * entries. */
void rm__secagg_graph(int world, int rank, int neighbours_log, int threshold,
                      const uint8_t perm_seed[32], int *nbr, int *n,
                      int *guard);

/* One generation's state: key pair, pairwise seeds, graph, call counter. */
typedef struct rm__secagg rm__secagg_t;

/* KEYS + CONFIRM (collective over comm; relay as above). OUT *out on RM_OK.
 * RM_ERR_INVALID_ARG: rm__secagg_check failed or world < threshold (nothing
 * moved). RM_ERR_PROTOCOL: a public key is malformed, bound to another
 * generation or rank, a low-order point, or CONFIRM did not sum to zero.
 * err gets words for every failure. */
rm_status_t rm__secagg_open(rm_comm_t *comm, const rm__secagg_params_t *p,
                            const rm__secagg_relay_t *relay,
                            rm__secagg_t **out, char *err, size_t errlen);
/* The fixed-point scale this generation uses (the spec's, or the default
 * for its world, resolved by rm__secagg_open). */
double rm__secagg_scale(const rm__secagg_t *sa);
/* Wipes every secret (sodium_memzero) and frees. NULL is fine. */
void rm__secagg_close(rm__secagg_t *sa);

typedef struct rm__secagg_stats {
  double norm;        /* my L2 norm before clipping */
  int clipped;        /* my vector was clipped (or not finite: zeros) */
  int members;        /* world of the call */
  int neighbours;     /* ranks I masked with */
  int guard;          /* I added a self-mask */
  uint64_t seq;       /* this call's seq */
  size_t bytes_sent;  /* data-plane payload bytes this call, this rank */
  double ms_mask, ms_reduce, ms_open, ms_unmask; /* phase times (unmask: its all-gather too) */
} rm__secagg_stats_t;

/* MASK .. UNMASK: collective over the generation's comm; every member calls
 * with the same count. recv[i] = (sum over members of q_u[i]) / scale, the
 * SUM of the clipped inputs within world / scale per coordinate; with mean
 * != 0 that sum / members, the division folded into the dequantization (no
 * second pass over recv). send == recv is in place. Optional (NULL =
 * not wanted): my_q (count lanes of bits/8 bytes) = my quantized input
 * before masking; sum_q (same) = the unmasked integer sum; st. A failure of
 * any round up to OPEN returns its status (the communicator's, or the
 * relay's) and the caller re-forms; recv is unspecified then. Past OPEN
 * (the commit point) the call does not fail: a sharded UNMASK whose
 * all-gather breaks finishes from this rank's own copy of the masked sum
 * (secagg.c), and the next call sees the broken communicator. */
rm_status_t rm__secagg_sum_f32(rm__secagg_t *sa, const float *send,
                               float *recv, size_t count, int mean, void *my_q,
                               void *sum_q, rm__secagg_stats_t *st,
                               char *err, size_t errlen);

#endif
