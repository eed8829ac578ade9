/*
 * secagg.c - secure aggregation (secagg.h): a pairwise-masked all-reduce of
 * clipped fixed-point gradients. The arithmetic (capacity rule,
 * rounding, PRG, KDF, graph) is secagg_math.c.
 *
 * PARTIES. Members: the N ranks of one generation's communicator. The RELAY:
 * the coordinator, through secagg.h's exchange (a barrier with payloads);
 * it sees public keys and self-mask seeds, never a data-plane byte. An
 * OBSERVER: anybody who reads data-plane traffic, a member included (a rank
 * sees every message addressed to it during the all-reduce).
 *
 * ROUNDS. Per generation, in rm__secagg_open:
 *   KEYS     u makes an X25519 pair (sk_u, pk_u) and posts the 44-byte KEYS
 *            payload under "secagg/keys"; every slot is checked; the perm
 *            seed = BLAKE2b-256(all N payloads in rank order); for every
 *            neighbour v (graph below) s_uv = KDF(job, generation, u, v,
 *            X25519(sk_u, pk_v), pk_min, pk_max) (secagg_int.h). sk_u is
 *            wiped as soon as the seeds exist.
 *   CONFIRM  4 lanes of the pairwise masks alone (seq UINT64_MAX, purpose
 *            3), one rm_allreduce SUM: must be 0 on every lane. A key that
 *            reached one end of an edge altered makes the two ends derive
 *            different seeds and the sum nonzero (probability of a false
 *            pass 2^-(4 x bits)): RM_ERR_PROTOCOL on every rank, nothing else
 *            moves. A rank that refused a KEYS slot (malformed, low-order
 *            point) contributes random lanes instead, so that every rank
 *            fails CONFIRM with it rather than wait for it.
 * Per call seq = 0, 1, ... (rm__secagg_sum_f32; seq is taken before any
 * work, so even a failed call never lets a later one reuse its masks):
 *   MASK     norm in double; factor = clip/norm when norm > clip, 0 when the
 *            norm is not finite (zeros: a vector that cannot be measured
 *            cannot be bounded); q = stochastic_round(x * factor * scale);
 *            y = q + sum_{v in nbr(u)} sign(v - u) PRG(s_uv; seq, 0)
 *                  + [u guard] PRG(b_u; seq, 1),  b_u = 32 fresh random bytes.
 *            Fused per 16 KiB block (input, keystream, lanes stay in cache).
 *   REDUCE   rm_allreduce(y, I32 | I64, SUM), any algorithm; integer sums
 *            wrap in Z_{2^bits} there. Every rank ends with
 *            Y = sum_u q_u + sum_{guards g} PRG(b_g): the pairwise masks
 *            cancel over the whole membership (each edge once +, once -).
 *   OPEN     u posts the 40-byte OPEN payload (b_u, zeros on non-guards)
 *            under "secagg/open/<seq>", only after its REDUCE completed.
 *   UNMASK   Y - sum_g PRG(b_g; seq, 1) = sum_u q_u, exactly (CAPACITY in
 *            secagg_math.c: no wrap); recv = that / scale. Either every
 *            rank strips every guard from the whole vector (g keystreams
 *            of it), or, SHARDED, when that saves at least a keystream
 *            (g (N - 1) >= 2 N, shard_lanes below):
 *   GATHER   the vector's first N c lanes cut into N shards of c lanes (c a
 *            multiple of 16: every shard starts on a ChaCha block); rank r
 *            strips the guards from shard r only, dequantizes it (recv's
 *            floats, or the lanes themselves when sum_q is asked for),
 *            adds PRG(b_f; seq, 5) over it (b_f: the first guard in rank
 *            order; 32-bit lanes for floats), and rm_allgather puts every
 *            shard at every rank, which subtracts PRG(b_f; seq, 5) from the
 *            others and takes its own again from its stripped Y. The last
 *            count - N c lanes (< 16 N) every rank strips itself. Cost:
 *            g / N + 1 keystreams and an all-gather of (N-1)/N of the vector.
 *            Why the REDUCE stays a full all-reduce rather than a
 *            reduce-scatter (which would move fewer bytes): after OPEN every
 *            member must be able to finish the call alone (DROPOUTS below);
 *            after a reduce-scatter a member lost past OPEN would take the
 *            only copy of its shard of Y with it, while the survivors could
 *            unmask their own shards, and their redo over the survivors
 *            would hand them x_lost on those shards.
 *
 * DATA PLANE per call: the REDUCE's messages (lanes of Y's partial sums),
 * then, when sharded, the GATHER's (shards of the sum, masked with
 * PRG(b_f; seq, 5); floats, or lanes with sum_q). Every rank takes the
 * same path: it depends only on N, g and count.
 * WIRE FORMAT of the relay payloads (little-endian):
 *   KEYS  "secagg/keys", 44 bytes         OPEN  "secagg/open/<seq>", 40 bytes
 *     0  32  X25519 public key              0  32  b_u (zeros: not a guard)
 *    32   8  generation                    32   8  seq
 *    40   4  rank
 * Every received slot r must carry our generation and rank r (KEYS) or our
 * seq (OPEN; zeros where r is no guard), and our own slot must come back as
 * we posted it; else RM_ERR_PROTOCOL naming r.
 *
 * GRAPH (secagg.h rm__secagg_graph). "all": every pair masks. "log": a
 * circulant graph C_N(1..k/2), k = 2 ceil(log2 N) (complete when that is
 * >= N - 1), on the positions of a permutation seeded by the transcript.
 * C_N(1..k/2) with k even is the Harary graph H_{k,N}: k-vertex-connected.
 * GUARDS: the ranks at the first g positions of the permutation, g =
 * min(N, max(2, min(t, k + 1))) with t the job's threshold (k = N - 1 for
 * "all"): Bonawitz et al.'s bound, fewer than t colluders; each guard costs
 * every member one keystream of the vector at UNMASK (1/N of one when
 * sharded), so g = N for every job would cost N of them (1 + 1 sharded).
 *
 * INVARIANTS.
 *   1. A (key, nonce) stream is never used twice: keys are fresh per
 *      generation (pairwise, rounding) or per call (b_u); nonces carry seq
 *      and purpose (b_f masks its self-mask with purpose 1 and the GATHER
 *      with purpose 5: two streams).
 *   2. Every message of the all-reduce is a sum over a subset S of members
 *      of their y_u (all-reduce algorithms only add); internal edges of S
 *      cancel in it, so it carries sum_{u in S} q_u + the pairwise masks of
 *      the edges leaving S + the self-masks of the guards in S.
 *   3. Before OPEN releases, nobody holds every guard's b_g; the relay
 *      releases only once every member posted, i.e. once every member holds
 *      Y whole (it posts after its REDUCE, an all-reduce). So after the
 *      release every member can finish the call alone: a GATHER that fails
 *      (a member lost) is completed from Y by stripping every guard from
 *      the other shards here, and the call returns RM_OK.
 *
 * SECURITY ARGUMENT (honest-but-curious parties, coalition C of members).
 * Even once every b_g is public (after OPEN), a message over S (invariant
 * 2) is uniform in Z_{2^bits}^D to C unless C knows every seed of the edges
 * leaving S, i.e. every edge leaving S has an end in C, with C disjoint
 * from S (a member of C in S knows its own input anyway: take S \ C). Then
 * C contains the neighbourhood of S. "all": S's neighbourhood is V \ S, so
 * C = V \ S and S is all-but-C, whose sum C learns from the total minus its
 * own inputs anyway; a single observer v learns only S = all-but-v.
 * "log": if S u C != V, C separates S from the rest, so |C| >= k
 * (k-connectivity); a coalition of fewer than k members learns nothing
 * beyond the total. An outside observer of the data plane holds no seed:
 * every message it sees is uniform (the all-gather phase carries Y, masked
 * by the guards' PRG(b_g); the GATHER's, a sum masked by PRG(b_f; seq, 5),
 * b_f known to members and the relay only).
 * DROPOUTS: option (a), "survivors redo with fresh masks over the new
 * membership". A member lost during a call fails the communicator (and the
 * relay's barrier); the session re-forms: next generation, rm__secagg_open
 * again, fresh keys, and the survivors redo the call. OPEN is the commit
 * point. A loss BEFORE OPEN released: Y cannot be unmasked by anyone
 * (invariant 3; the guards' b_g of the call are never revealed - the relay
 * releases all or nothing), so the redo reveals only the sum without the
 * lost member w. A loss AFTER: every member already holds Y and every b_g;
 * the call is complete and is not redone (the caller must not redo it: its
 * result stands); a sharded UNMASK whose GATHER the loss breaks finishes
 * alone (invariant 3), so the call returns its result, never an error the
 * caller would redo. So no party ever learns both "sum with w" and "sum
 * without w" of the same inputs, whose difference is x_w: the classic
 * difference attack on dropout recovery. With g guards, a coalition of
 * fewer than g members always misses an honest guard's b_g before OPEN, so
 * it cannot unmask early either. Together: a coalition of fewer than
 * min(t, k) members ("all": fewer than t) learns nothing beyond the sum of
 * the others' inputs, under any pattern of dropouts.
 * THREAT MODEL. The coordinator is honest-but-curious: it relays the
 * payloads faithfully; it sees pk_u and b_g but no data-plane byte, so
 * learns nothing about inputs. An attacker who alters a key on its way to
 * one member (or a corrupted relay reply) is detected by CONFIRM. OUT OF
 * SCOPE: a malicious coordinator that substitutes keys consistently on both
 * ends of an edge (man in the middle; without a PKI nothing can tell its
 * keys from the members'), integrity of the masked vectors on the data
 * plane (a tampered vector corrupts the sum; that is the transport's TLS /
 * the robust aggregators' business), and Bonawitz et al.'s option (b),
 * Shamir-shared seeds that let survivors finish a call after a dropout:
 * not built (option (a) costs a redo instead).
 *
 * COST per call, per rank, D = count: the all-reduce on D lanes of bits/8
 * bytes (the same bytes as f32 at 32 bits); keystream (|nbr| + [guard]) *
 * D * bits/8 at MASK and g * D * bits/8 at UNMASK, or sharded (g / N) * D
 * * bits/8 + 4 D (the GATHER's mask) and an all-gather of (N-1)/N * 4 D
 * bytes; plus 2 D (32-bit lanes) or 4 D (64-bit) bytes of rounding coins
 * ("all", g = N: ~2 N D lanes whole, ~N + 2 sharded; "log": ~4 log2 N D).
 * ChaCha20 is most of a call's CPU time (perf, N = 4, 12M lanes: ~60 % in
 * libsodium's; secagg_chacha.c's AVX-512F keystream makes the same bytes
 * about 3x faster). Measured: bench/secagg (rm_bench_secagg).
 * Memory: one cached D-lane buffer (never N x D).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "rm_le.h"
#include "rm_clock.h"
#include "rm_testhook.h"
#include "secagg/secagg.h"
#include "secagg/secagg_int.h"

#define KEYS_LEN 44
#define OPEN_LEN 40

struct rm__secagg {
  rm_comm_t *comm;            /* borrowed */
  rm__secagg_relay_t relay;   /* copied */
  rm__secagg_params_t p;      /* scale resolved */
  int world, rank, n_nbr, guard, n_guards;
  int *nbr;                   /* n_nbr, ascending */
  uint8_t (*seed)[32];        /* s_{rank, nbr[j]}: secret */
  uint8_t *guards;            /* world */
  uint8_t *open_all;          /* world * OPEN_LEN */
  uint8_t round_key[32];      /* secret */
  uint8_t b[32];              /* this call's self-mask seed: secret until OPEN */
  uint8_t perm_seed[32];
  double bound;               /* |q| clamp */
  uint64_t seq;
  void *y;                    /* ycap bytes, grown on demand */
  size_t ycap;
};

static void seterr(char *err, size_t len, const char *fmt, ...)
{
  va_list ap;
  if (err == NULL || len == 0) return;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}


static double ms_since(int64_t t0) { return (double)(rm__now_ns() - t0) / 1e6; }

static rm_dtype_t lane_dt(int bits) { return bits == 32 ? RM_I32 : RM_I64; }

/* The communicator's words for a failed collective. */
static rm_status_t comm_fail(rm__secagg_t *sa, rm_status_t st, const char *round, char *err,
                             size_t errlen)
{
  const char *why = rm_comm_last_error(sa->comm);
  seterr(err, errlen, "secure aggregation %s: %s%s%s", round, rm_status_string(st),
         why && *why ? ": " : "", why ? why : "");
  return st;
}

static rm_status_t relay_call(rm__secagg_t *sa, const char *name, const void *mine, size_t len,
                              void *all, char *err, size_t errlen)
{
  char why[256] = "";
  rm_status_t st = sa->relay.exchange(sa->relay.ctx, name, mine, len, all, why, sizeof why);
  if (st != RM_OK)
    seterr(err, errlen, "secure aggregation: relay %s: %s%s%s", name, rm_status_string(st),
           why[0] ? ": " : "", why);
  return st;
}

/* ---- KEYS ---- */

static rm_status_t check_keys(rm__secagg_t *sa, const uint8_t *all, const uint8_t *mine,
                              char *err, size_t errlen)
{
  for (int r = 0; r < sa->world; r++) {
    const uint8_t *s = all + (size_t)r * KEYS_LEN;
    if (rm__get_le64(s + 32) != sa->p.generation || rm__get_le32(s + 40) != (uint32_t)r) {
      seterr(err, errlen, "secure aggregation KEYS: rank %d's public key is bound to "
             "generation %llu rank %u, not generation %llu rank %d", r,
             (unsigned long long)rm__get_le64(s + 32), rm__get_le32(s + 40),
             (unsigned long long)sa->p.generation, r);
      return RM_ERR_PROTOCOL;
    }
  }
  if (memcmp(all + (size_t)sa->rank * KEYS_LEN, mine, KEYS_LEN) != 0) {
    seterr(err, errlen, "secure aggregation KEYS: the relay returned rank %d's (our own) "
           "public key altered", sa->rank);
    return RM_ERR_PROTOCOL;
  }
  return RM_OK;
}

static rm_status_t derive(rm__secagg_t *sa, const uint8_t *all, const uint8_t sk[32],
                          char *err, size_t errlen)
{
  int *scratch = malloc((size_t)sa->world * sizeof *scratch);
  if (scratch == NULL) return RM_ERR_NOMEM;
  crypto_generichash(sa->perm_seed, 32, all, (size_t)sa->world * KEYS_LEN, NULL, 0);
  rm__secagg_graph(sa->world, sa->rank, sa->p.neighbours_log, sa->p.threshold,
                   sa->perm_seed, sa->nbr, &sa->n_nbr, &sa->guard);
  rm__secagg_guards(sa->world, sa->p.neighbours_log, sa->p.threshold, sa->perm_seed,
                    scratch, sa->guards);
  free(scratch);
  /* a substituted key (secagg_hook.c), of a rank this one masks with: in a
   * "log" graph another rank's key may never be used, and altering it is
   * rightly harmless. The transcript hash above saw the real keys. */
  if (rm__testhook_secagg_tamper(sa->rank) && sa->n_nbr > 0)
    ((uint8_t *)all)[(size_t)sa->nbr[0] * KEYS_LEN] ^= 0x10;
  for (int j = 0; j < sa->n_nbr; j++) {
    int v = sa->nbr[j];
    if (rm__secagg_seed(sa->p.job_id, sa->p.generation, sa->rank, v, sk,
                        all + (size_t)sa->rank * KEYS_LEN, all + (size_t)v * KEYS_LEN,
                        sa->seed[j]) != RM_OK) {
      seterr(err, errlen, "secure aggregation KEYS: rank %d's public key is a low-order "
             "point (rejected)", v);
      return RM_ERR_PROTOCOL;
    }
  }
  return RM_OK;
}

static rm_status_t do_keys(rm__secagg_t *sa, char *err, size_t errlen)
{
  uint8_t mine[KEYS_LEN], sk[crypto_box_SECRETKEYBYTES];
  uint8_t *all = malloc((size_t)sa->world * KEYS_LEN);
  rm_status_t st = RM_ERR_NOMEM;
  if (all == NULL) return st;
  rm__testhook_secagg_die(sa->rank, "keys", 0);
  crypto_box_keypair(mine, sk);
  rm__put_le64(mine + 32, sa->p.generation);
  rm__put_le32(mine + 40, (uint32_t)sa->rank);
  if ((st = relay_call(sa, "secagg/keys", mine, KEYS_LEN, all, err, errlen)) != RM_OK) goto out;
  if ((st = check_keys(sa, all, mine, err, errlen)) != RM_OK) goto out;
  st = derive(sa, all, sk, err, errlen);
out:
  sodium_memzero(sk, sizeof sk);
  free(all);
  return st;
}

/* ---- CONFIRM ---- */

static rm_status_t do_confirm(rm__secagg_t *sa, int poison, char *err, size_t errlen)
{
  uint64_t lanes[4] = {0, 0, 0, 0}; /* 4 lanes of 32 or 64 bits: 32 bytes suffice */
  rm__testhook_secagg_die(sa->rank, "confirm", 0);
  if (poison) /* our KEYS failed: make every rank's CONFIRM fail with us */
    randombytes_buf(lanes, sizeof lanes);
  else
    rm__secagg_mask_add(sa->p.bits, sa->rank, sa->nbr, sa->n_nbr,
                        (const uint8_t(*)[32])sa->seed, NULL, UINT64_MAX, RM__SA_CONFIRM, lanes,
                        0, 4);
  rm_status_t st = rm_allreduce(sa->comm, lanes, lanes, 4, lane_dt(sa->p.bits), RM_SUM);
  if (st != RM_OK) return comm_fail(sa, st, "CONFIRM", err, errlen);
  if (poison) return RM_ERR_PROTOCOL; /* err already says why */
  if (lanes[0] | lanes[1] | lanes[2] | lanes[3]) {
    seterr(err, errlen, "secure aggregation CONFIRM: pairwise masks do not cancel: a public "
           "key was substituted or corrupted on its way to some member, or a member refused "
           "the keys it received (generation %llu)", (unsigned long long)sa->p.generation);
    return RM_ERR_PROTOCOL;
  }
  return RM_OK;
}

/* ---- lifecycle ---- */

rm_status_t rm__secagg_open(rm_comm_t *comm, const rm__secagg_params_t *p,
                            const rm__secagg_relay_t *relay, rm__secagg_t **out, char *err,
                            size_t errlen)
{
  rm__secagg_t *sa;
  rm_status_t st;
  if (comm == NULL || p == NULL || relay == NULL || relay->exchange == NULL || out == NULL) {
    seterr(err, errlen, "secure aggregation: NULL argument");
    return RM_ERR_INVALID_ARG;
  }
  int world = rm_comm_world(comm);
  if ((st = rm__secagg_check(p, world, err, errlen)) != RM_OK) return st; /* nothing moved */
  if (rm__secagg_sodium() != RM_OK) {
    seterr(err, errlen, "secure aggregation: sodium_init failed");
    return RM_ERR_INTERNAL;
  }
  if ((sa = calloc(1, sizeof *sa)) == NULL) goto nomem;
  sa->comm = comm;
  sa->relay = *relay;
  sa->p = *p;
  if (sa->p.scale == 0) sa->p.scale = rm__secagg_default_scale(p->bits, p->clip, world);
  sa->bound = floor(sa->p.clip * sa->p.scale) + 1;
  sa->world = world;
  sa->rank = rm_comm_rank(comm);
  sa->n_guards = rm__secagg_nguards(world, p->neighbours_log, p->threshold);
  sa->nbr = malloc((size_t)world * sizeof *sa->nbr);
  sa->seed = calloc((size_t)world, sizeof *sa->seed);
  sa->guards = malloc((size_t)world);
  sa->open_all = malloc((size_t)world * OPEN_LEN);
  if (!sa->nbr || !sa->seed || !sa->guards || !sa->open_all) goto nomem;
  randombytes_buf(sa->round_key, sizeof sa->round_key);
  /* A rank that refuses the keys it received (RM_ERR_PROTOCOL) still takes
   * part in CONFIRM, poisoned, so that every rank fails together and the
   * communicator stays usable; a relay failure is every rank's already. */
  st = do_keys(sa, err, errlen);
  if (st != RM_OK && st != RM_ERR_PROTOCOL) goto fail;
  if ((st = do_confirm(sa, st != RM_OK, err, errlen)) != RM_OK) goto fail;
  *out = sa;
  return RM_OK;
nomem:
  st = RM_ERR_NOMEM;
  seterr(err, errlen, "secure aggregation: out of memory");
fail:
  rm__secagg_close(sa);
  return st;
}

void rm__secagg_close(rm__secagg_t *sa)
{
  if (sa == NULL) return;
  if (sa->seed) sodium_memzero(sa->seed, (size_t)sa->world * sizeof *sa->seed);
  sodium_memzero(sa->round_key, sizeof sa->round_key);
  sodium_memzero(sa->b, sizeof sa->b);
  free(sa->seed);
  free(sa->nbr);
  free(sa->guards);
  free(sa->open_all);
  free(sa->y);
  sodium_memzero(sa, sizeof *sa);
  free(sa);
}

double rm__secagg_scale(const rm__secagg_t *sa) { return sa->p.scale; }

/* ---- per call ---- */

/* Eight partial sums: one chain of dependent double adds ran at the
 * adder's latency per element, not at its throughput (the same double
 * accumulation, summed in another order). */
static double l2_norm(const float *x, size_t n)
{
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) s[k] += (double)x[i + k] * x[i + k];
  for (; i < n; i++) s[0] += (double)x[i] * x[i];
  return sqrt(((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
}

/* MASK: q and every mask into sa->y, one cache-sized block at a time. */
static void do_mask(rm__secagg_t *sa, const float *send, size_t count, double factor,
                    uint64_t seq, void *my_q)
{
  size_t w = (size_t)sa->p.bits / 8, per = RM__SA_BLOCK / 4;
  if (sa->guard) randombytes_buf(sa->b, sizeof sa->b);
  for (size_t i = 0; i < count; i += per) {
    size_t m = count - i < per ? count - i : per;
    char *lanes = (char *)sa->y + i * w;
    rm__secagg_quantize(sa->p.bits, send + i, m, factor, sa->p.scale, sa->bound,
                        sa->round_key, seq, i, lanes);
    if (my_q) memcpy((char *)my_q + i * w, lanes, m * w);
    rm__secagg_mask_add(sa->p.bits, sa->rank, sa->nbr, sa->n_nbr,
                        (const uint8_t(*)[32])sa->seed, sa->guard ? sa->b : NULL, seq,
                        RM__SA_PAIR, lanes, i, m);
  }
}

static rm_status_t do_open(rm__secagg_t *sa, uint64_t seq, char *err, size_t errlen)
{
  uint8_t mine[OPEN_LEN];
  char name[64];
  rm_status_t st;
  memcpy(mine, sa->b, 32); /* zeros on a non-guard (never set) */
  rm__put_le64(mine + 32, seq);
  snprintf(name, sizeof name, "secagg/open/%llu", (unsigned long long)seq);
  st = relay_call(sa, name, mine, OPEN_LEN, sa->open_all, err, errlen);
  sodium_memzero(mine, sizeof mine);
  if (st != RM_OK) return st;
  for (int r = 0; r < sa->world; r++) {
    const uint8_t *s = sa->open_all + (size_t)r * OPEN_LEN;
    if (rm__get_le64(s + 32) != seq) {
      seterr(err, errlen, "secure aggregation OPEN: rank %d posted for call %llu, not %llu", r,
             (unsigned long long)rm__get_le64(s + 32), (unsigned long long)seq);
      return RM_ERR_PROTOCOL;
    }
    if (!sa->guards[r] && !sodium_is_zero(s, 32)) {
      seterr(err, errlen, "secure aggregation OPEN: rank %d is no guard but posted a "
             "self-mask seed", r);
      return RM_ERR_PROTOCOL;
    }
  }
  if (sa->guard && memcmp(sa->open_all + (size_t)sa->rank * OPEN_LEN, sa->b, 32) != 0) {
    seterr(err, errlen, "secure aggregation OPEN: the relay returned rank %d's (our own) "
           "self-mask seed altered", sa->rank);
    return RM_ERR_PROTOCOL;
  }
  return RM_OK;
}

/* UNMASK of lanes [first, first + n): strip every guard's self-mask, then
 * dequantize by `unscale` (the fixed-point scale, times the member count for
 * a mean: one rounding, and no second pass over recv to divide) and copy to
 * sum_q, per block. */
static void do_unmask(rm__secagg_t *sa, float *recv, uint64_t seq, void *sum_q, size_t first,
                      size_t n, double unscale)
{
  size_t w = (size_t)sa->p.bits / 8, per = RM__SA_BLOCK / 4;
  for (size_t i = first; i < first + n; i += per) {
    size_t m = first + n - i < per ? first + n - i : per;
    char *lanes = (char *)sa->y + i * w;
    for (int g = 0; g < sa->world; g++)
      if (sa->guards[g])
        rm__secagg_prg_add(sa->p.bits, sa->open_all + (size_t)g * OPEN_LEN, seq, RM__SA_SELF,
                           -1, lanes, i, m);
    if (sum_q) memcpy((char *)sum_q + i * w, lanes, m * w);
    rm__secagg_dequantize(sa->p.bits, lanes, m, unscale, recv + i);
  }
}

/* SHARD: lanes per rank of the sharded UNMASK, a multiple of 16 (a ChaCha
 * block of 32-bit lanes, so every shard starts on a block), or 0: unmask
 * the whole vector here. Sharding costs g / N + 1 keystreams of the vector
 * and an all-gather against g keystreams: taken when it saves at least
 * one keystream, i.e. g (N - 1) >= 2 N (N = 4 with g = 3 or 4: yes; g = 2
 * or N = 2: never). */
static size_t shard_lanes(const rm__secagg_t *sa, size_t count)
{
  if ((int64_t)sa->n_guards * (sa->world - 1) < 2 * (int64_t)sa->world) return 0;
  return count / ((size_t)sa->world * 16) * 16;
}

/* The sharded UNMASK (protocol at the top): own shard unmasked, masked for
 * the all-gather with PRG(b_first_guard; seq, RM__SA_GATHER), gathered into
 * sum_q (lanes) or recv (floats), the other shards stripped. A failed
 * all-gather comes AFTER the commit point: this rank finishes the call
 * alone from Y, which it holds whole, and the call stands. */
static void do_unmask_sharded(rm__secagg_t *sa, float *recv, uint64_t seq, void *sum_q,
                              size_t c, size_t *bytes_sent, double unscale)
{
  size_t off = (size_t)sa->rank * c, tot = c * (size_t)sa->world;
  int bits = sum_q ? sa->p.bits : 32;
  size_t w = (size_t)bits / 8;
  char *buf = sum_q ? (char *)sum_q : (char *)recv;
  const uint8_t *key = NULL;
  for (int g = 0; g < sa->world && key == NULL; g++)
    if (sa->guards[g]) key = sa->open_all + (size_t)g * OPEN_LEN;
  do_unmask(sa, recv, seq, sum_q, off, c, unscale);
  rm__secagg_prg_add(bits, key, seq, RM__SA_GATHER, 1, buf + off * w, off, c);
  rm__testhook_secagg_die(sa->rank, "gather", seq);
  rm_status_t st = rm_allgather(sa->comm, buf + off * w, buf, c,
                                sum_q ? lane_dt(sa->p.bits) : RM_F32);
  if (st != RM_OK) {
    do_unmask(sa, recv, seq, sum_q, 0, off, unscale);
    do_unmask(sa, recv, seq, sum_q, off + c, tot - off - c, unscale);
  } else {
    /* a ring all-gather: N - 1 shards out of every rank */
    *bytes_sent += (size_t)(sa->world - 1) * c * w;
    rm__secagg_prg_add(bits, key, seq, RM__SA_GATHER, -1, buf, 0, off);
    rm__secagg_prg_add(bits, key, seq, RM__SA_GATHER, -1, buf + (off + c) * w, off + c,
                       tot - off - c);
    if (sum_q) {
      rm__secagg_dequantize(bits, sum_q, off, unscale, recv);
      rm__secagg_dequantize(bits, buf + (off + c) * w, tot - off - c, unscale, recv + off + c);
    }
  }
  /* our own shard once more from y (unmasked there): cheaper than its
   * keystream, and right even where a failed all-gather overwrote it */
  if (sum_q) memcpy((char *)sum_q + off * w, (char *)sa->y + off * w, c * w);
  rm__secagg_dequantize(sa->p.bits, (char *)sa->y + off * (size_t)sa->p.bits / 8, c, unscale,
                        recv + off);
}

static rm_status_t grow_y(rm__secagg_t *sa, size_t bytes)
{
  if (bytes <= sa->ycap) return RM_OK;
  void *y = malloc(bytes);
  if (y == NULL) return RM_ERR_NOMEM;
  free(sa->y);
  sa->y = y;
  sa->ycap = bytes;
  return RM_OK;
}

rm_status_t rm__secagg_sum_f32(rm__secagg_t *sa, const float *send, float *recv, size_t count,
                               int mean, void *my_q, void *sum_q, rm__secagg_stats_t *st,
                               char *err, size_t errlen)
{
  rm_allreduce_info_t ai;
  rm__secagg_stats_t s;
  rm_status_t rc;
  int64_t t;
  if (sa == NULL || (count > 0 && (send == NULL || recv == NULL))) {
    seterr(err, errlen, "secure aggregation: NULL argument");
    return RM_ERR_INVALID_ARG;
  }
  size_t w = (size_t)sa->p.bits / 8;
  if ((uint64_t)count > RM__SA_STREAM_MAX / 8) {
    seterr(err, errlen, "secure aggregation: %zu elements is more than one call can mask", count);
    return RM_ERR_INVALID_ARG;
  }
  if (grow_y(sa, count * w) != RM_OK) {
    seterr(err, errlen, "secure aggregation: out of memory for %zu lanes", count);
    return RM_ERR_NOMEM;
  }
  memset(&s, 0, sizeof s);
  memset(&ai, 0, sizeof ai);
  s.seq = sa->seq++; /* taken first: a failed call's masks are never reused */
  s.members = sa->world;
  s.neighbours = sa->n_nbr;
  s.guard = sa->guard;

  rm__testhook_secagg_die(sa->rank, "mask", s.seq);
  t = rm__now_ns();
  s.norm = l2_norm(send, count);
  double factor = !isfinite(s.norm) ? 0 : s.norm > sa->p.clip ? sa->p.clip / s.norm : 1;
  s.clipped = factor != 1;
  do_mask(sa, send, count, factor, s.seq, my_q);
  s.ms_mask = ms_since(t);

  rm__testhook_secagg_die(sa->rank, "reduce", s.seq);
  t = rm__now_ns();
  rc = rm_allreduce_ex(sa->comm, sa->y, sa->y, count, lane_dt(sa->p.bits), RM_SUM,
                       RM_ALGO_AUTO, &ai);
  s.ms_reduce = ms_since(t);
  s.bytes_sent = ai.bytes_sent;
  if (rc != RM_OK) {
    rc = comm_fail(sa, rc, "REDUCE", err, errlen);
    goto out;
  }

  rm__testhook_secagg_die(sa->rank, "open", s.seq);
  t = rm__now_ns();
  rc = do_open(sa, s.seq, err, errlen);
  s.ms_open = ms_since(t);
  if (rc != RM_OK) goto out;

  rm__testhook_secagg_die(sa->rank, "unmask", s.seq);
  t = rm__now_ns();
  size_t c = shard_lanes(sa, count), tot = c * (size_t)sa->world;
  double unscale = sa->p.scale * (mean ? (double)sa->world : 1.0);
  if (c > 0) do_unmask_sharded(sa, recv, s.seq, sum_q, c, &s.bytes_sent, unscale);
  do_unmask(sa, recv, s.seq, sum_q, tot, count - tot, unscale); /* the tail, or all */
  s.ms_unmask = ms_since(t);
  if (st) *st = s;
out:
  sodium_memzero(sa->b, sizeof sa->b);
  sodium_memzero(sa->open_all, (size_t)sa->world * OPEN_LEN);
  return rc;
}
