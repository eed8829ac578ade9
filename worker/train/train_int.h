/*
 * train_int.h - internal interface of the training workloads (worker/train/).
 *
 * Pieces, each in its own file:
 *
 *   rand.c      permutations and checksums (option strings: common/rm_opts.h)
 *   dataset.c   CSV loader, deterministic train/test split, standardisation
 *   mlp.c       two-layer perceptron: forward, backward, SGD with momentum
 *   checkpoint.c  trainer state on disk (checkpoint/checkpoint.h format)
 *   robust_step.c the reduce through rm_aggregate, and the attacks
 *   trainer.c   one synchronous data-parallel step: global batch -> this
 *               rank's shard -> local gradient sum -> all-reduce -> update
 *   train_workload.c, synthetic_workload.c   the rm_workload_ops_t tables
 *   ref_main.c  rm-train-ref, the single-process reference trainer
 *
 * Nothing here is thread-safe; one thread drives one trainer.
 */
#ifndef RM_TRAIN_INT_H
#define RM_TRAIN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"
#include "rm_opts.h"
#include "rm_testhook.h"
#include "train.h"
#include "session/step_engine.h"

/* ---- small helpers (rand.c) ---- */

/* splitmix64: tiny, seedable, identical on every platform. */
static inline uint64_t rm__rng_next(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
/* Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float rm__rng_unit(uint64_t *s)
{
  return (float)(rm__rng_next(s) >> 40) * (1.0f / 16777216.0f);
}
/* Uniform in [0, n) (multiply-shift; bias < n / 2^64, irrelevant here). */
static inline uint32_t rm__rng_below(uint64_t *s, uint32_t n)
{
  return (uint32_t)(((unsigned __int128)rm__rng_next(s) * n) >> 64);
}
/* Fisher-Yates permutation of 0..n-1 from seed. */
void rm__permute(uint32_t *perm, uint32_t n, uint64_t seed);

/* 64-bit FNV-1a over bytes. */
uint64_t rm__fnv1a(const void *data, size_t len);

/* ---- dataset (dataset.c) ---- */

typedef struct rm__dataset {
  uint32_t n;       /* rows */
  uint32_t dim;     /* features per row */
  uint32_t classes; /* labels are 0..classes-1 */
  float *x;         /* n * dim, row-major, owned */
  uint8_t *y;       /* n, owned */
} rm__dataset_t;

/* Load a headerless CSV whose rows are dim numbers then an integer label in
 * [0, classes). dim is taken from the first row; every row must agree. On
 * error err says which file, line and field; *out is untouched. */
rm_status_t rm__dataset_load_csv(const char *path, uint32_t classes,
                                 rm__dataset_t *out, char *err, size_t errlen);
/* Deterministic split: a permutation from seed; the first n / test_div rows
 * of it form the test set, the rest the training set (same row order as the
 * permutation). Both OUT sets are new; `all` is untouched. */
rm_status_t rm__dataset_split(const rm__dataset_t *all, uint64_t seed,
                              uint32_t test_div, rm__dataset_t *train,
                              rm__dataset_t *test);
/* Standardise every feature with the TRAINING set's mean and standard
 * deviation (a constant feature keeps scale 1), applied to both sets. */
void rm__dataset_standardize(rm__dataset_t *train, rm__dataset_t *test);
void rm__dataset_free(rm__dataset_t *d);

/* ---- the model (mlp.c) ---- */

enum { RM__ACT_RELU = 0, RM__ACT_TANH = 1 };

/* in -> hidden (act) -> out, softmax cross-entropy. Parameters live in one
 * contiguous f32 array so one all-reduce moves the whole gradient:
 *
 *   offset                      size            what
 *   0                           hidden * in     W1, row j = hidden unit j
 *   hidden*in                   hidden          b1
 *   hidden*(in+1)               out * hidden    W2, row k = class k
 *   hidden*(in+1) + out*hidden  out             b2
 */
typedef struct rm__mlp {
  uint32_t in, hidden, out;
  int act;
  size_t nparams;
  float *params;   /* nparams, owned */
  float *velocity; /* nparams, momentum buffer, owned */
  float *scratch;  /* per-sample activations, owned */
} rm__mlp_t;

/* Glorot-uniform weights (He-uniform for ReLU) from seed, zero biases: the
 * same bytes on every rank and every run with the same seed. */
rm_status_t rm__mlp_init(rm__mlp_t *m, uint32_t in, uint32_t hidden,
                         uint32_t out, int act, uint64_t seed);
void rm__mlp_free(rm__mlp_t *m);
/* One sample: adds its loss gradient to grad (nparams floats, NOT zeroed
 * here), adds its cross-entropy to *loss and 1 to *correct when the argmax
 * is the label. grad may be NULL for a forward pass only. */
void rm__mlp_sample(rm__mlp_t *m, const float *x, unsigned label,
                    float *grad, double *loss, uint32_t *correct);
/* velocity = momentum * velocity + grad; params -= lr * velocity. */
void rm__mlp_sgd(rm__mlp_t *m, const float *grad, float lr, float momentum);
/* Mean loss and accuracy over a whole dataset (forward only). */
void rm__mlp_evaluate(rm__mlp_t *m, const rm__dataset_t *d, double *loss,
                      double *accuracy);

/* ---- one data-parallel step (trainer.c) ---- */

typedef struct rm__train_cfg {
  const char *dataset; /* CSV path */
  uint32_t batch;      /* GLOBAL batch, split across ranks */
  uint32_t hidden;
  int act;
  float lr, momentum;
  uint64_t seed;       /* init and data order */
  uint64_t split_seed; /* train/test split */
} rm__train_cfg_t;

typedef struct rm__trainer {
  rm__train_cfg_t cfg;
  rm__dataset_t train, test;
  rm__mlp_t model;
  uint64_t step;        /* steps completed */
  float *grad;          /* nparams + 2 (loss sum, correct count), owned */
  float *prev;          /* params then velocity before the last step */
  int have_prev;
  uint32_t *perm;       /* data order of epoch perm_epoch */
  uint64_t perm_epoch;
  double last_loss, last_acc;
  int flip_labels;      /* labelflip attacker: train on classes-1-y */
} rm__trainer_t;

/* Load, split, standardise, initialise. err names what is wrong. */
rm_status_t rm__trainer_init(rm__trainer_t *t, const rm__train_cfg_t *cfg,
                             char *err, size_t errlen);
void rm__trainer_free(rm__trainer_t *t);
uint64_t rm__trainer_steps_per_epoch(const rm__trainer_t *t);
/* One step of the global batch on this rank's shard. comm NULL means a
 * single process with no data plane (rank 0 of 1). Fills rep. */
rm_status_t rm__trainer_step(rm__trainer_t *t, rm_comm_t *comm,
                             rm_step_report_t *rep);
/* The two halves of a step, for schemes that choose who computes which rows
 * (backup workers, deadlines, gradient coding):
 * shard_grad: sum of per-sample gradients of rows [lo, hi) of global batch
 * `step` into grad (nparams + 2 floats: then loss sum, correct count;
 * zeroed first). apply: grad holds such sums over `rows` samples in total;
 * divide by rows, keep the previous state (roll-back), SGD, step += 1. */
void rm__trainer_shard_grad(rm__trainer_t *t, uint64_t step, uint32_t lo,
                            uint32_t hi, float *grad);
void rm__trainer_apply(rm__trainer_t *t, float *grad, uint32_t rows);
/* Before steps of a new generation: make every rank hold the parameters of
 * step start_step (roll back a step that not every member finished, copy
 * from the lowest rank that holds them). */
rm_status_t rm__trainer_resync(rm__trainer_t *t, rm_comm_t *comm,
                               uint64_t start_step);
uint64_t rm__trainer_checksum(const rm__trainer_t *t);

/* Checkpoints (checkpoint.c) in the project's one checkpoint format
 * (worker/checkpoint/checkpoint.h): step, parameters and momentum, written
 * atomically into dir as the file of (job_id, rank, step); OUT path (may be
 * NULL). load() refuses a file of another model shape or seed, a truncated
 * one or a bad checksum, and then leaves the trainer untouched.
 * load_step(): the checkpoint of `step` written by any rank < max_rank. */
rm_status_t rm__trainer_save(const rm__trainer_t *t, const char *dir,
                             uint64_t job_id, int rank, uint64_t generation,
                             char *path, size_t path_len, char *err,
                             size_t errlen);
rm_status_t rm__trainer_load(rm__trainer_t *t, const char *path, char *err,
                             size_t errlen);
rm_status_t rm__trainer_load_step(rm__trainer_t *t, const char *dir,
                                  uint64_t job_id, int max_rank, uint64_t step,
                                  char *err, size_t errlen);

/* ---- robust aggregation and attacks (robust_step.c) ---- */
enum {
  RM__ATK_NONE = 0,
  RM__ATK_SIGNFLIP,  /* sends -g */
  RM__ATK_GAUSSIAN,  /* sends N(0, sigma^2), sigma = scale * rms(g) */
  RM__ATK_ALIE,      /* honest mean + z * honest std, per coordinate */
  RM__ATK_IPM,       /* -eps * honest mean */
  RM__ATK_LABELFLIP, /* honest gradient of labels 9 - y */
  RM__ATK_NAN,       /* all NaN */
  RM__ATK_COUNT
};
/* "none" "signflip" "gaussian" "alie" "ipm" "labelflip" "nan". */
const char *rm__attack_name(int a);
int rm__attack_parse(const char *s); /* -1 when unknown */

typedef struct rm__robust {
  rm_agg_config_t cfg;  /* the job's aggregation (rm_agg_config_init'ed) */
  int attack;           /* RM__ATK_* */
  int attackers;        /* the last `attackers` ranks of the world attack */
  double attack_scale;  /* < 0: the attack's default (see robust_step.c) */
  int rank, world;      /* of the current generation */
  /* Secure aggregation: the session whose secure sum replaces
   * the method (the spec refuses robust methods with it); NULL = off. */
  rm_session_t *secure;
  /* scratch, owned, grown on demand */
  float *vec, *agg;     /* nparams each: my contribution, the aggregate */
  double *stats;        /* 2 * nparams + 3 */
  uint8_t *excluded;    /* world */
  uint32_t *excluded_list; /* world: rep->excluded_ranks points here */
  size_t cap_np;
  int cap_world;
} rm__robust_t;

/* Anything but the plain all-reduce: a method other than mean, clipping,
 * an attack, or secure aggregation. */
int rm__robust_active(const rm__robust_t *r);
/* Is this rank one of the attackers? */
int rm__robust_attacker(const rm__robust_t *r);
/* The reduce of a step: t->grad holds this rank's shard sums over `rows`
 * rows (+ loss sum, correct count). Afterwards t->grad[0..np) is the
 * aggregated mean gradient (the same bits on every rank), t->grad[np] the
 * batch's mean loss and t->grad[np+1] its accuracy: apply with rows = 1.
 * rep->excluded_ranks / n_excluded name the ranks rm_aggregate excluded
 * (pointing into r, valid until the next call). I2 of trainer.c holds. */
rm_status_t rm__robust_reduce(rm__trainer_t *t, rm_comm_t *comm,
                              rm__robust_t *r, uint32_t rows,
                              rm_step_report_t *rep);
void rm__robust_free(rm__robust_t *r);

/* ---- simulated stragglers (slow.c; options of train and synthetic) ----
 * The knob of straggler tests and benches: options slow_rank, slow_factor,
 * slow_from, slow_until, stall_rank, stall_step, stall_ms, parsed here once
 * for both workloads. */
#define RM__SLOW_MAX_RANKS 16
typedef struct rm__slow {
  int nranks;                      /* ranks slowed on purpose */
  int ranks[RM__SLOW_MAX_RANKS];   /* slow_rank=R or R1:R2:R3 */
  double factor;                   /* slow_factor (>= 1): their compute x F */
  uint64_t from, until;            /* slow_from / slow_until: 0-based steps
                                      [from, until) that are slow; until 0 =
                                      every step from `from` on (transient
                                      stragglers: a window) */
  int stall_rank;                  /* stall_rank: -1 none */
  uint64_t stall_step;             /* stall_step: the 0-based step ... */
  double stall_ms;                 /* ... whose compute takes stall_ms more */
} rm__slow_t;

void rm__slow_init(rm__slow_t *sl);
/* One workload option: 1 = the key was one of ours (and val was good),
 * 0 = not ours, -1 = ours but bad (err names key and range). */
int rm__slow_option(rm__slow_t *sl, const char *key, const char *val,
                    char *err, size_t errlen);
/* Is `rank` one of the slowed ranks at 0-based `step`? */
int rm__slow_is(const rm__slow_t *sl, int rank, uint64_t step);
/* Extra simulated compute of `rank` at `step` when its honest compute
 * takes base_ms: base_ms * (factor - 1) while slowed, plus stall_ms at the
 * stall. */
double rm__slow_extra_ms(const rm__slow_t *sl, int rank, uint64_t step,
                         double base_ms);
/* Any straggler simulated at all? */
int rm__slow_any(const rm__slow_t *sl);
/* The option names, for "unknown option" messages. */
#define RM__SLOW_OPTION_NAMES \
  "slow_rank slow_factor slow_from slow_until stall_rank stall_step stall_ms"

/* ---- a step under a straggler policy (straggler_step.c) ----
 * The policy itself is the session's step engine (session/step_engine.h),
 * shared with every workload and session program; this is train's use. */
typedef struct rm__policy {
  rm__sp_t sp;           /* the step engine, (re)started per generation */
  double sim_compute_ms; /* simulated compute added to every step */
  rm__slow_t slow;       /* simulated stragglers (slow_* / stall_* options) */
  rm__robust_t *robust;  /* policy "none" only: the step's reduce when
                            rm__robust_active (NULL = plain all-reduce) */
  float *owed;           /* stale: the owed gradient (nparams + 2), owned */
  uint32_t owed_rows;    /* ... over this many rows */
} rm__policy_t;
/* One step with comm (world >= 1); fills rep (zeroed first). Errors of the
 * gate (generation moved on) are RM_ERR_ABORTED; a broken staleness bound
 * is RM_ERR_INTERNAL; I2 of trainer.c holds. */
rm_status_t rm__policy_step(rm__trainer_t *t, rm_comm_t *comm,
                            rm__policy_t *p, rm_step_report_t *rep);
void rm__policy_free(rm__policy_t *p);

/* ---- kill points for the fault tests ----
 * rm__crash_point / rm__crash_wants (crash_hook.c, test builds only) are
 * declared in common/rm_testhook.h, included above: no-ops unless built with
 * RINGMASTER_TEST_HOOKS. */

/* For tests: the live state behind a `train` workload's opaque pointer. */
rm__trainer_t *rm__train_workload_trainer(void *state);

#endif
