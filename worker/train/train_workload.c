/*
 * train_workload.c - the `train` workload: data-parallel SGD of a two-layer
 * MLP on the optical-digits set (see trainer.c for the step and its maths).
 *
 * Options ("key=value,..."; every key optional):
 *
 *   key          default   meaning
 *   dataset      (1)       CSV path: 64 features then a label 0..9 per row
 *   batch        64        GLOBAL batch size B, split across the ranks
 *   hidden       64        hidden units
 *   act          relu      relu | tanh
 *   lr           0.05      learning rate
 *   momentum     0.9       heavy-ball momentum (0 = plain SGD)
 *   seed         1         initialisation and data order
 *   split_seed   1         train/test split (80/20)
 *   steps        (2)       stop after this many global steps
 *   epochs       (2)       or after this many passes (floor(n_train/B) steps each)
 *   verify       0         every K steps all-gather the parameter checksums
 *                          and fail with RM_ERR_INTERNAL if ranks differ
 *   ckpt_dir     (3)       folder of the checkpoints (shared by the ranks)
 *   sim_compute_ms 0       simulated compute added to every step (bench)
 *   slow_rank    -1        rank(s) slowed on purpose (straggler tests and
 *                          benches): R or R1:R2:R3 ...
 *   slow_factor  1         ... whose compute takes this many times longer
 *   slow_from, slow_until  0-based steps [from, until) they are slow (a
 *                          transient straggler; until 0 = to the end)
 *   stall_rank, stall_step, stall_ms  one rank stalls once, for stall_ms
 *                          (session/step_engine.h rm__slow_t)
 *   attack       none      signflip gaussian alie ipm labelflip nan: the
 *                          last `attackers` ranks send a Byzantine gradient
 *                          (tests, demonstrations; robust_step.c defines
 *                          each attack and its constant)
 *   attackers    1 (4)     how many ranks attack (the last K of the world)
 *   attack_scale (5)       gaussian sigma / rms(g) (10), alie z (Baruch et
 *                          al.'s z_max), ipm eps (0.1)
 *
 *   (4) when attack is given; 0 otherwise
 *   (5) the attack's default, in parentheses
 *
 *   (3) RINGMASTER_CHECKPOINT_DIR, else ./ringmaster-ckpt
 *
 *   (1) RINGMASTER_TRAIN_DATASET, else the repository's data/digits/digits.csv
 *   (2) the step limit is the smallest of: steps, epochs * steps-per-epoch,
 *       and the agent's max_steps (when nonzero); 200 when none is given.
 *
 * Gradient reduction: each rank sums per-sample gradients of its shard, the
 * f32 sums are all-reduced with RM_SUM, and every rank divides by B (under
 * a straggler policy: straggler_step.c). With the job's aggregation other than
 * plain mean (a robust method, clip_norm > 0) or an attack, the per-worker
 * mean gradients go through rm_aggregate instead (robust_step.c); that
 * composes with straggler_policy none only (a gated policy is refused:
 * RM_ERR_INVALID_ARG with words in env->error). With secure_aggregation
 * the per-worker mean gradients are summed by the session's
 * secure sum instead (ringmaster/secure.h: clipped, masked, only the sum
 * revealed) and divided by the members; the step's [loss, correct, rows]
 * stay on a plain all-reduce (three numbers of metrics, not gradients).
 *
 * Recovery: every checkpoint_every steps (job spec) each rank
 * writes its state atomically (checkpoint/checkpoint.h) and reports the step;
 * a worker that joins a running job (replacement) first loads the
 * checkpoint the coordinator names (the last one every member completed),
 * then rm__trainer_resync hands it the live parameters from a survivor.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "rm_clock.h"
#include "rm_fs.h"
#include "rm_log.h"
#include "rm_param.h"
#include "train_int.h"

#ifndef RM_TRAIN_DEFAULT_DATASET
#define RM_TRAIN_DEFAULT_DATASET "data/digits/digits.csv"
#endif

enum { DEFAULT_STEPS = 200 };
#define MAX_ATTACKERS (1u << 20)

typedef struct train_state {
  rm__trainer_t t;
  uint64_t steps, epochs, verify;
  char dataset[1024];
  char ckpt_dir[1024];
  uint64_t last_ckpt;
  rm__robust_t robust; /* aggregation (from env) and attack (options) */
  rm__policy_t pol;    /* straggler policy engine + simulated stragglers */
} train_state_t;

static rm_status_t set_option(train_state_t *s, rm__train_cfg_t *cfg,
                              const char *key, const char *val, char *err,
                              size_t errlen)
{
  uint64_t u = 0;
  double d = 0;
  rm_status_t st = RM_OK;
  int slow = rm__slow_option(&s->pol.slow, key, val, err, errlen);
  if (slow) return slow > 0 ? RM_OK : RM_ERR_INVALID_ARG;
  if (!strcmp(key, "dataset")) {
    snprintf(s->dataset, sizeof(s->dataset), "%s", val);
  } else if (!strcmp(key, "batch")) {
    st = rm__opt_u64(key, val, 1, 1u << 20, &u, err, errlen);
    cfg->batch = (uint32_t)u;
  } else if (!strcmp(key, "hidden")) {
    st = rm__opt_u64(key, val, 1, 1u << 16, &u, err, errlen);
    cfg->hidden = (uint32_t)u;
  } else if (!strcmp(key, "act")) {
    if (!strcmp(val, "relu")) cfg->act = RM__ACT_RELU;
    else if (!strcmp(val, "tanh")) cfg->act = RM__ACT_TANH;
    else {
      snprintf(err, errlen, "option act=%s: expected relu or tanh", val);
      st = RM_ERR_INVALID_ARG;
    }
  } else if (!strcmp(key, "lr")) {
    st = rm__opt_double(key, val, 0, 100, &d, err, errlen);
    cfg->lr = (float)d;
  } else if (!strcmp(key, "momentum")) {
    st = rm__opt_double(key, val, 0, 0.999999, &d, err, errlen);
    cfg->momentum = (float)d;
  } else if (!strcmp(key, "seed")) {
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &cfg->seed, err, errlen);
  } else if (!strcmp(key, "split_seed")) {
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &cfg->split_seed, err, errlen);
  } else if (!strcmp(key, "steps")) {
    st = rm__opt_u64(key, val, 1, UINT64_MAX, &s->steps, err, errlen);
  } else if (!strcmp(key, "epochs")) {
    st = rm__opt_u64(key, val, 1, 1u << 30, &s->epochs, err, errlen);
  } else if (!strcmp(key, "ckpt_dir")) {
    snprintf(s->ckpt_dir, sizeof(s->ckpt_dir), "%s", val);
  } else if (!strcmp(key, "sim_compute_ms")) {
    st = rm__opt_double(key, val, 0, 1e6, &s->pol.sim_compute_ms, err, errlen);
  } else if (!strcmp(key, "verify")) {
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &s->verify, err, errlen);
  } else if (!strcmp(key, "attack")) {
    int a = rm__attack_parse(val);
    if (a < 0) {
      snprintf(err, errlen, "option attack=%s: expected none, signflip, "
               "gaussian, alie, ipm, labelflip or nan", val);
      st = RM_ERR_INVALID_ARG;
    }
    s->robust.attack = a;
  } else if (!strcmp(key, "attackers")) {
    st = rm__opt_u64(key, val, 0, MAX_ATTACKERS, &u, err, errlen);
    s->robust.attackers = (int)u;
  } else if (!strcmp(key, "attack_scale")) {
    st = rm__opt_double(key, val, 0, 1e6, &s->robust.attack_scale, err,
                        errlen);
  } else {
    snprintf(err, errlen, "unknown option '%s' for workload train (known: "
             "dataset batch hidden act lr momentum seed split_seed steps "
             "epochs verify ckpt_dir sim_compute_ms " RM__SLOW_OPTION_NAMES
             " attack attackers attack_scale)",
             key);
    st = RM_ERR_INVALID_ARG;
  }
  return st;
}

static rm_status_t train_create(const char *options, void **state, char *err,
                                size_t errlen)
{
  rm_status_t st = RM_OK;
  char key[64], val[1024];
  train_state_t *s = calloc(1, sizeof(*s));
  if (!s) return RM_ERR_NOMEM;
  rm__train_cfg_t cfg = {.batch = 64, .hidden = 64, .act = RM__ACT_RELU,
                         .lr = 0.05f, .momentum = 0.9f, .seed = 1,
                         .split_seed = 1};
  snprintf(s->dataset, sizeof(s->dataset), "%s",
           rm__env_str("RINGMASTER_TRAIN_DATASET", RM_TRAIN_DEFAULT_DATASET));
  snprintf(s->ckpt_dir, sizeof(s->ckpt_dir), "%s",
           rm__env_str("RINGMASTER_CHECKPOINT_DIR", "ringmaster-ckpt"));
  rm__slow_init(&s->pol.slow);
  rm_agg_config_init(&s->robust.cfg);
  s->robust.attack_scale = -1;
  s->robust.attackers = -1;
  const char *p = options ? options : "";
  int r;
  while ((r = rm__opt_next(&p, key, sizeof(key), val, sizeof(val), err,
                           errlen)) > 0) {
    st = set_option(s, &cfg, key, val, err, errlen);
    if (st != RM_OK) goto fail;
  }
  if (r < 0) {
    st = RM_ERR_INVALID_ARG;
    goto fail;
  }
  if (s->robust.attackers < 0) /* attack=X alone: one attacker */
    s->robust.attackers = s->robust.attack != RM__ATK_NONE ? 1 : 0;
  cfg.dataset = s->dataset;
  st = rm__trainer_init(&s->t, &cfg, err, errlen);
  if (st != RM_OK) goto fail;
  s->t.cfg.dataset = s->dataset;
  *state = s;
  return RM_OK;
fail:
  free(s);
  return st;
}

static uint64_t step_limit(const train_state_t *s, uint64_t max_steps)
{
  uint64_t lim = UINT64_MAX;
  if (s->steps) lim = s->steps;
  if (s->epochs) {
    uint64_t e = s->epochs * rm__trainer_steps_per_epoch(&s->t);
    if (e < lim) lim = e;
  }
  if (max_steps && max_steps < lim) lim = max_steps;
  return lim == UINT64_MAX ? DEFAULT_STEPS : lim;
}

/* All-gather every rank's checksum; RM_ERR_INTERNAL naming the first rank
 * that differs from rank 0. */
static rm_status_t verify_checksums(rm_comm_t *comm, uint64_t mine,
                                    uint64_t step)
{
  int world = rm_comm_world(comm);
  uint64_t *all = calloc((size_t)world, sizeof(uint64_t));
  if (!all) return RM_ERR_NOMEM;
  rm_status_t st = rm_allgather(comm, &mine, all, 1, RM_I64);
  for (int r = 1; st == RM_OK && r < world; r++)
    if (all[r] != all[0]) {
      RM_ERROR("train: step %llu: parameters differ: rank 0 checksum "
               "%016llx, rank %d %016llx", (unsigned long long)step,
               (unsigned long long)all[0], r, (unsigned long long)all[r]);
      st = RM_ERR_INTERNAL;
    }
  free(all);
  return st;
}

/* A worker behind the group (new, or restarted) loads the last checkpoint
 * every member completed; resync then copies the live state from a peer. */
static void load_checkpoint(train_state_t *s, const rm_workload_env_t *env)
{
  char err[512];
  uint64_t want = env->checkpoint_step;
  if (!want || s->t.step >= want || want > env->start_step) return;
  rm_status_t st = rm__trainer_load_step(&s->t, s->ckpt_dir, env->job_id,
                                         env->world + 64, want, err,
                                         sizeof(err));
  if (st == RM_OK)
    RM_INFO("train: rank %d loaded the checkpoint of step %llu from %s",
            env->rank, (unsigned long long)want, s->ckpt_dir);
  else
    RM_WARN("train: rank %d: %s (the parameters will come from a peer)",
            env->rank, err);
}

/* The job asked for checkpoints (checkpoint_every > 0): ckpt_dir and its
 * missing parents are created, and a checkpoint that cannot be written fails
 * the step with the path and the reason in env->error (the agent reports the
 * worker failed, an event, and on_failure decides) instead of training on
 * without the checkpoints the job relies on for recovery. */
static rm_status_t save_checkpoint(train_state_t *s, rm_workload_env_t *env)
{
  char err[512];
  if (!env->checkpoint_every || s->t.step % env->checkpoint_every) return RM_OK;
  if (rm__mkdir_p(s->ckpt_dir, err, sizeof err) != 0 ||
      rm__trainer_save(&s->t, s->ckpt_dir, env->job_id, env->rank,
                       env->generation, NULL, 0, err, sizeof(err)) != RM_OK) {
    int n = snprintf(env->error, sizeof env->error, "checkpoint of step "
                     "%llu not written: %s", (unsigned long long)s->t.step, err);
    if (n >= (int)sizeof env->error) /* mark the cut */
      memcpy(env->error + sizeof env->error - 4, "...", 4);
    RM_ERROR("train: rank %d: %s", env->rank, env->error);
    return RM_ERR_SYSTEM;
  }
  rm__ckpt_prune(s->ckpt_dir, env->job_id, env->rank, 3, NULL, err, sizeof(err));
  s->last_ckpt = s->t.step;
  return RM_OK;
}

/* The step engine for this generation (session/step_engine.h). */
static rm_status_t policy_start(train_state_t *s, rm_workload_env_t *env)
{
  rm_status_t st = rm__sp_start(&s->pol.sp, env->straggler_policy, env->rank,
                                env->world, env->coded_s, env->max_staleness,
                                env->gate, env->report_ctx);
  if (st == RM_ERR_INVALID_ARG)
    snprintf(env->error, sizeof env->error, "straggler_policy %s with "
             "max_staleness %d: not a policy this worker can run",
             env->straggler_policy ? env->straggler_policy : "none",
             env->max_staleness);
  return st;
}

/* The job's aggregation for this generation; refuses what cannot hold
 * (words in env->error, RM_ERR_INVALID_ARG: the agent fails the job). */
static rm_status_t robust_setup(train_state_t *s, rm_workload_env_t *env,
                                const rm__policy_t *pol)
{
  rm__robust_t *r = &s->robust;
  const char *m = env->aggregation && env->aggregation[0] ? env->aggregation
                                                          : "mean";
  rm_agg_config_init(&r->cfg);
  if (rm_agg_method_parse(m, &r->cfg.method) != RM_OK) {
    snprintf(env->error, sizeof env->error, "unknown aggregation method "
             "'%s' (mean, median, trimmed_mean, krum, multi_krum, bulyan, "
             "centered_clip)", m);
    return RM_ERR_INVALID_ARG;
  }
  r->cfg.f = env->agg_f;
  r->cfg.m = env->agg_m;
  r->cfg.iterations = env->agg_iterations;
  r->cfg.clip_norm = env->clip_norm;
  r->cfg.tau = env->agg_tau;
  r->rank = env->rank;
  r->world = env->world;
  s->t.flip_labels = r->attack == RM__ATK_LABELFLIP && rm__robust_attacker(r);
  r->secure = env->secure && env->comm ? env->session : NULL;
  if (r->secure && (rm__sp_gated(&pol->sp) || r->cfg.method != RM_AGG_MEAN)) {
    snprintf(env->error, sizeof env->error, "secure aggregation needs "
             "straggler_policy none and aggregation mean (this job: %s, %s)",
             env->straggler_policy ? env->straggler_policy : "none", m);
    return RM_ERR_INVALID_ARG;
  }
  if (!env->comm || !rm__robust_active(r)) return RM_OK;
  if (r->attack != RM__ATK_NONE && r->attackers >= env->world) {
    snprintf(env->error, sizeof env->error, "attackers=%d needs a world of "
             "at least %d (one honest rank); the world is %d", r->attackers,
             r->attackers + 1, env->world);
    return RM_ERR_INVALID_ARG;
  }
  if (rm__sp_gated(&pol->sp)) {
    snprintf(env->error, sizeof env->error, "straggler_policy %s cannot be "
             "combined with aggregation %s%s%s: the policy leaves gradients "
             "out, which a robust method cannot tell from attacks (use "
             "straggler_policy none)", env->straggler_policy, m,
             r->cfg.clip_norm > 0 ? " / clip_norm" : "",
             r->attack != RM__ATK_NONE ? " / attack" : "");
    return RM_ERR_INVALID_ARG;
  }
  char why[200];
  if (rm_agg_check(&r->cfg, env->world, why, sizeof why) != RM_OK) {
    snprintf(env->error, sizeof env->error, "aggregation %s on %d workers: "
             "%s", m, env->world, why);
    return RM_ERR_INVALID_ARG;
  }
  return RM_OK;
}

static rm_status_t train_run(void *state, rm_workload_env_t *env)
{
  train_state_t *s = state;
  rm__policy_t *pol = &s->pol;
  rm_status_t rs = policy_start(s, env);
  if (rs == RM_OK) rs = robust_setup(s, env, pol);
  if (rs != RM_OK) {
    RM_ERROR("train: rank %d: %s", env->rank, env->error);
    return rs;
  }
  load_checkpoint(s, env);
  rm_status_t st = rm__trainer_resync(&s->t, env->comm, env->start_step);
  if (st != RM_OK) return st;
  uint64_t lim = step_limit(s, env->max_steps);
  pol->robust = &s->robust;
  int plain = !rm__sp_gated(&pol->sp) && !pol->sim_compute_ms &&
              !rm__slow_any(&pol->slow) && !rm__robust_active(&s->robust);
  while (s->t.step < lim) {
    rm_step_report_t rep;
    if (plain || !env->comm) st = rm__trainer_step(&s->t, env->comm, &rep);
    else st = rm__policy_step(&s->t, env->comm, pol, &rep);
    if (st != RM_OK && s->robust.secure &&
        (st == RM_ERR_PROTOCOL || st == RM_ERR_INVALID_ARG)) {
      /* a key that does not verify, a membership below the threshold: no
       * re-forming clears it (workload.h) */
      snprintf(env->error, sizeof env->error, "%s",
               rm_session_last_error(s->robust.secure));
      return st == RM_ERR_PROTOCOL ? RM_ERR_INTERNAL : st;
    }
    if (st != RM_OK) return st;
    if ((st = save_checkpoint(s, env)) != RM_OK) return st;
    rep.checkpoint_step = s->last_ckpt;
    if (s->verify && env->comm &&
        (rep.step % s->verify == 0 || rep.step == lim)) {
      int64_t t0 = rm__now_ns();
      st = verify_checksums(env->comm, rep.param_checksum, rep.step);
      rep.wait_ms = (rm__now_ns() - t0) / 1e6;
      if (st == RM_ERR_INTERNAL)
        snprintf(env->error, sizeof env->error, "step %llu: parameters "
                 "differ across ranks", (unsigned long long)rep.step);
      if (st != RM_OK) return st;
    }
    /* named metrics (ringmaster.h rm_metric_t), plotted per step by the
     * dashboard: the learning rate and the global batch's examples over
     * this rank's step time */
    double ms = rep.compute_ms + rep.comm_ms + rep.wait_ms;
    rm_metric_t met[2] = {{"lr", (double)s->t.cfg.lr},
                          {"examples/s", ms > 0 ? s->t.cfg.batch * 1000.0 / ms : 0}};
    rep.metrics = met;
    rep.n_metrics = ms > 0 ? 2 : 1;
    if (env->report && env->report(env->report_ctx, &rep)) return RM_OK;
  }
  double loss, acc;
  rm__mlp_evaluate(&s->t.model, &s->t.test, &loss, &acc);
  RM_INFO("train: %llu steps done; test accuracy %.4f, test loss %.4f",
          (unsigned long long)s->t.step, acc, loss);
  return RM_OK;
}

static void train_summary(void *state, char *buf, size_t len)
{
  train_state_t *s = state;
  double loss, acc;
  char strag[256];
  rm__mlp_evaluate(&s->t.model, &s->t.test, &loss, &acc);
  rm__sp_summary(&s->pol.sp, strag, sizeof strag);
  snprintf(buf, len,
           "{\"accuracy\":%.6f,\"test_loss\":%.6f,\"test_samples\":%u,"
           "\"train_samples\":%u,\"steps\":%llu,\"train_loss\":%.6f,"
           "\"train_accuracy\":%.6f,\"param_checksum\":\"%016llx\",%s}",
           acc, loss, s->t.test.n, s->t.train.n,
           (unsigned long long)s->t.step,
           isfinite(s->t.last_loss) ? s->t.last_loss : 0.0,
           isfinite(s->t.last_acc) ? s->t.last_acc : 0.0,
           (unsigned long long)rm__trainer_checksum(&s->t), strag);
}

static void train_destroy(void *state)
{
  train_state_t *s = state;
  if (!s) return;
  rm__robust_free(&s->robust);
  rm__policy_free(&s->pol);
  rm__trainer_free(&s->t);
  free(s);
}

rm__trainer_t *rm__train_workload_trainer(void *state)
{
  return &((train_state_t *)state)->t;
}

const rm_workload_ops_t rm__workload_train = {
    .name = "train",
    .create = train_create,
    .run = train_run,
    .summary = train_summary,
    .destroy = train_destroy,
};
