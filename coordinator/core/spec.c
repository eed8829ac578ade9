/*
 * spec.c - job spec defaults and validation, state names.
 *
 * Validation refuses the first bad field with its name (api/ returns it as
 * {"error": {"field": ...}}). Policies that later issues implement are known
 * words; every policy named here is implemented (recovery.c, step_gate.c).
 *
 * Command jobs. workload "command" runs the user's program under
 * each worker's agent: `command` (packed argv, count + NUL-terminated
 * strings) is required exactly then; `env` and `workdir` belong to it and
 * are refused for the built-in workloads (they would be ignored silently).
 * Env keys are [A-Za-z_][A-Za-z0-9_]*, not RINGMASTER_* (the agent sets
 * those: a job could otherwise point its program at another job).
 *
 * Straggler policy x workload. Checked at submit
 * (check_policy_workload, k_policy_refused): a refusal is a 400 naming
 * straggler_policy with the reason in the words below.
 *
 *   policy     allreduce  synthetic  train  command
 *   none       yes        yes        yes    yes
 *   backup     yes        yes        yes    yes
 *   deadline   yes        yes        yes    yes
 *   coded      no (1)     yes        yes    no (3)
 *   stale      no (2)     yes        yes    no (4)
 *   auto       yes        yes        yes    yes
 *
 *   (1) the allreduce workload sums fixed buffers: there is no batch to
 *       partition into coded shares.
 *   (2) the allreduce workload has no compute to finish late: its buffers
 *       are filled instantly, so nothing would ever be folded.
 *   (3) coded partitions are computed by the built-in trainer; the
 *       coordinator cannot make a user's program compute them.
 *   (4) folding needs the worker to keep a late gradient and keep computing
 *       while its peers step on; a user's program computes in its own code,
 *       which ringmaster cannot resume later (deadline or auto instead).
 *
 * Across the table: deterministic refuses every policy but none (which
 * workers contribute to a step depends on timing), and so does a robust
 * aggregation or clip_norm (it combines every member's gradient each
 * step). Parameters (check_straggler): backup 1 <= backup_workers < world;
 * coded s = backup_workers >= 1 with (s+1) | world; stale 1 <=
 * max_staleness <= 64 with backup_workers 0; auto 0 <= backup_workers <
 * world (>= 1: it mitigates with backup, 0: with a deadline);
 * max_staleness is refused (must be 0) under every policy but stale.
 *
 * Secure aggregation (check_secure). On when secagg_bits != 0
 * (REST: the "secure_aggregation" object is present). Defaults: bits 32,
 * clip aggregation.clip_norm when > 0 else 1, scale 0 (the worker picks the
 * largest power of two with N*(clip*scale+1) <= 2^(bits-2)), threshold
 * max(2, n/2 + 1) with n = world_size (min_workers for an elastic job),
 * neighbours "all". Rules, each a 400 naming the field and the numbers:
 *   secure_aggregation.bits       32 or 64
 *   secure_aggregation.clip       finite, > 0 (0 = the default)
 *   secure_aggregation.scale      finite, >= 0; when > 0 the sum cannot
 *                                 wrap: N*(clip*scale + 1) < 2^(bits-1),
 *                                 N = max(world_size, max_workers)
 *   secure_aggregation.threshold  2 <= t <= world (world_size, or
 *                                 max_workers for an elastic job); an
 *                                 elastic job's min_workers >= t (it may
 *                                 form with that few: a sum over fewer
 *                                 inputs than t would be revealed). A
 *                                 fixed-size job forms with all world_size
 *                                 members; under on_failure shrink the
 *                                 threshold is its floor (recovery.c fails
 *                                 the job at a re-formation below it)
 *   secure_aggregation.neighbours all or log
 * and the combinations, named both in the message:
 *   aggregation.method    only mean: a robust method needs every plaintext
 *                         gradient, a secure sum reveals only the sum
 *   straggler_policy      only none: masks cancel only over the whole
 *                         membership; a dropped member is a re-formed
 *                         generation, not a step left out
 *   workload              train, allreduce or command (synthetic models
 *                         compute time, it has no gradient to protect)
 * With secagg_bits 0 every other secagg_* must be 0 / "" (a gRPC client
 * that set a threshold meant secure aggregation on).
 *
 * Strictness. These rules hold for every way in (REST after
 * api/jobspec.c, gRPC Jobs.SubmitJob after rpc_conv.c), so they live here:
 *   - Names (algorithm, dtype, workload, launcher, on_failure,
 *     straggler_policy, aggregation method) are compared exactly,
 *     case-sensitive, against one list each: k_workloads / k_launchers /
 *     k_on_failure / k_stragglers below, rm_algo_parse_exact and
 *     rm_dtype_name (common/rm_types.c), rm_agg_method_parse (rm_agg.c).
 *     An accepted alias is stored as the canonical name
 *     (rm_algo_name(rm_algo_parse_exact("halving_doubling")) == "hd").
 *   - "" in a name field means "omitted" here (protobuf strings cannot
 *     tell the two apart) and takes the default; the REST layer refuses an
 *     empty string before it gets here.
 *   - Every integer field has one range, k_ranges, checked first; the
 *     message states the range that holds. The REST layer stores a JSON
 *     integer the C field cannot hold as INT_MIN (int fields) or
 *     UINT64_MAX (steps, checkpoint_every), which every range excludes,
 *     so a huge or negative number gets the same message as any other
 *     value out of range.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/core_int.h"

static const char *const job_states[RM_JOB_STATE_COUNT] = {
    "pending", "forming", "running", "succeeded", "failed", "cancelled"};
static const char *const worker_states[RM_WORKER_STATE_COUNT] = {
    "joining", "running", "lost", "left", "failed", "stopped"};

const double rm_coord_step_bucket_le[RM_COORD_STEP_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

const char *rm_job_state_name(rm_job_state_t s)
{
  return (unsigned)s < RM_JOB_STATE_COUNT ? job_states[s] : "unknown";
}

const char *rm_mitigation_name(rm_mitigation_t m)
{
  return m == RM_MITIGATION_BACKUP ? "backup" : m == RM_MITIGATION_DEADLINE ? "deadline" : "off";
}

const char *rm_worker_state_name(rm_worker_state_t s)
{
  return (unsigned)s < RM_WORKER_STATE_COUNT ? worker_states[s] : "unknown";
}

rm_status_t rm_job_state_parse(const char *s, rm_job_state_t *out)
{
  for (int i = 0; s && i < RM_JOB_STATE_COUNT; i++)
    if (!strcmp(s, job_states[i])) {
      *out = (rm_job_state_t)i;
      return RM_OK;
    }
  return RM_ERR_INVALID_ARG;
}

void rm_job_spec_init(rm_job_spec_t *s)
{
  memset(s, 0, sizeof *s);
  snprintf(s->algorithm, sizeof s->algorithm, "auto");
  snprintf(s->dtype, sizeof s->dtype, "f32");
  snprintf(s->workload, sizeof s->workload, "allreduce");
  snprintf(s->launcher, sizeof s->launcher, "local");
  snprintf(s->on_failure, sizeof s->on_failure, "fail");
  snprintf(s->straggler_policy, sizeof s->straggler_policy, "none");
  snprintf(s->aggregation, sizeof s->aggregation, "mean");
  s->steps = 100;
}

#define RM__WORLD_WHY "must be in 1..65536, or 0 (or omitted) with min_workers and " \
                      "max_workers for an elastic job"

static rm_status_t bad(rm_coord_error_t *err, const char *field,
                       const char *msg)
{
  if (err) {
    snprintf(err->field, sizeof err->field, "%s", field);
    if (snprintf(err->message, sizeof err->message, "%s: %s", field, msg) >=
        (int)sizeof err->message)
      memcpy(err->message + sizeof err->message - 4, "...", 4); /* cut */
  }
  return RM_ERR_INVALID_ARG;
}

static int one_of(const char *v, const char *const *words)
{
  for (; *words; words++)
    if (!strcmp(v, *words)) return 1;
  return 0;
}

/* The train workload's dataset=PATH option, when the local launcher will run
 * the workers on this host: refuse a file the workers could not open before
 * anything is launched (for slurm/k8s the path is on other machines, and the
 * worker reports it). Options are "key=value,..." (worker/train/opts.c). */
static rm_status_t check_dataset(const rm_job_spec_t *s, rm_coord_error_t *err)
{
  char path[RM_COORD_OPTS_MAX], msg[200];
  const char *p = s->workload_options;
  if (strcmp(s->workload, "train") || strcmp(s->launcher, "local")) return RM_OK;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    while (n && isspace((unsigned char)*p)) p++, n--;
    if (n > 8 && !strncmp(p, "dataset", 7)) {
      const char *v = p + 7;
      while (v < p + n && isspace((unsigned char)*v)) v++;
      if (v < p + n && *v == '=') {
        v++;
        while (v < p + n && isspace((unsigned char)*v)) v++;
        size_t m = (size_t)(p + n - v);
        while (m && isspace((unsigned char)v[m - 1])) m--;
        snprintf(path, sizeof path, "%.*s", (int)m, v);
        if (access(path, R_OK) != 0) {
          snprintf(msg, sizeof msg, "dataset '%.96s' is not readable on "
                   "the coordinator's host (local launcher): %s", path,
                   strerror(errno));
          return bad(err, "workload_options", msg);
        }
      }
    }
    p += n + (end != NULL);
  }
  return RM_OK;
}

#define DEFAULT(f, v) \
  if (!s->f[0]) snprintf(s->f, sizeof s->f, "%s", v)
#define TERMINATED(f) (memchr(s->f, 0, sizeof s->f) != NULL)

/* The names a job spec may use: one list each. */
static const char *const k_workloads[] = {"allreduce", "train", "synthetic", "command", NULL};
static const char *const k_launchers[] = {"local", "slurm", "k8s", "none", NULL};
static const char *const k_on_failure[] = {"fail", "shrink", "replace", NULL};
static const char *const k_stragglers[] = {"none",  "backup", "deadline", "coded",
                                           "stale", "auto",   NULL};

/* The refused cells of the policy x workload table at the top of the file;
 * why: the message after "straggler_policy: ". */
static const struct {
  const char *workload, *policy, *why;
} k_policy_refused[] = {
    {"allreduce", "coded", "coded is not available for workload allreduce: it sums "
     "fixed buffers, so there is no batch to partition into coded shares (use none, "
     "backup, deadline or auto; coded is for train and synthetic)"},
    {"allreduce", "stale", "stale is not available for workload allreduce: its "
     "buffers are filled instantly, so no worker finishes late and nothing would "
     "be folded into a later step (use none, backup, deadline or auto)"},
    {"command", "coded", "coded is not available for workload command: coded "
     "partitions are computed by the built-in trainer, and the coordinator cannot "
     "make a user's program compute them (use none, backup, deadline or auto)"},
    {"command", "stale", "stale is not available for workload command: folding "
     "keeps a late gradient while the worker computes on, and a user's program "
     "computes in its own code, which ringmaster cannot resume later (use deadline "
     "or auto)"},
};

/* "must be a, b or c (exact spelling)" for a NULL-terminated list. */
static rm_status_t bad_word(rm_coord_error_t *err, const char *field,
                            const char *const *words)
{
  char msg[160];
  size_t n = (size_t)snprintf(msg, sizeof msg, "must be ");
  for (int i = 0; words[i] && n < sizeof msg; i++)
    n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s",
                          i == 0 ? "" : words[i + 1] ? ", " : " or ", words[i]);
  if (n < sizeof msg) snprintf(msg + n, sizeof msg - n, " (exact spelling)");
  return bad(err, field, msg);
}

static rm_status_t check_names(rm_job_spec_t *s, rm_coord_error_t *err)
{
  rm_algo_t a;
  rm_dtype_t d;
  if (!TERMINATED(algorithm) || rm_algo_parse_exact(s->algorithm, &a) != RM_OK)
    return bad(err, "algorithm", "must be auto, ring, hd (also spelled halving_doubling "
               "or halving-doubling), butterfly, tree, hierarchical (also hier) or nccl "
               "(exact spelling)");
  snprintf(s->algorithm, sizeof s->algorithm, "%s", rm_algo_name(a)); /* canonical */
  if (!TERMINATED(dtype) || rm_dtype_parse(s->dtype, &d) != RM_OK ||
      strcmp(s->dtype, rm_dtype_name(d)) != 0)
    return bad(err, "dtype", "must be f32, f64, f16, bf16, i32, i64 or u8 (exact spelling)");
  if (!TERMINATED(workload) || !one_of(s->workload, k_workloads))
    return bad_word(err, "workload", k_workloads);
  if (!TERMINATED(launcher) || !one_of(s->launcher, k_launchers))
    return bad_word(err, "launcher", k_launchers);
  if (!TERMINATED(on_failure) || !one_of(s->on_failure, k_on_failure))
    return bad_word(err, "on_failure", k_on_failure);
  if (!TERMINATED(straggler_policy) || !one_of(s->straggler_policy, k_stragglers))
    return bad_word(err, "straggler_policy", k_stragglers);
  if (s->deterministic && strcmp(s->straggler_policy, "none"))
    return bad(err, "deterministic", "true cannot be combined with "
               "straggler_policy backup, deadline, coded, stale or auto: which "
               "workers contribute to a step depends on timing (use "
               "straggler_policy none)");
  if (s->deterministic && strcmp(s->algorithm, "nccl") == 0)
    return bad(err, "deterministic", "true cannot be combined with algorithm nccl: NCCL "
               "picks its algorithm and protocol by topology and size, so ringmaster cannot "
               "promise the same bits (use a ringmaster algorithm, or drop deterministic)");
  return RM_OK;
}

/* The policy x workload table (top of the file); names already checked. */
static rm_status_t check_policy_workload(const rm_job_spec_t *s, rm_coord_error_t *err)
{
  for (size_t i = 0; i < sizeof k_policy_refused / sizeof *k_policy_refused; i++)
    if (!strcmp(s->workload, k_policy_refused[i].workload) &&
        !strcmp(s->straggler_policy, k_policy_refused[i].policy))
      return bad(err, "straggler_policy", k_policy_refused[i].why);
  return RM_OK;
}

/* The range of every integer field, in the order of the spec.
 * zero: 0 is accepted besides lo..hi (it means the default). why: the
 * message when it is not the generated one. */
#define RM__SAFE_INT ((long long)1 << 53) /* exact in a double: JSON clients */
static const struct {
  const char *field;
  size_t off;
  int u64; /* uint64_t field, else int */
  long long lo, hi;
  int zero;
  const char *why;
} k_ranges[] = {
    {"world_size", offsetof(rm_job_spec_t, world_size), 0, 0, 65536, 0, RM__WORLD_WHY},
    {"min_workers", offsetof(rm_job_spec_t, min_workers), 0, 0, 65536, 0, NULL},
    {"max_workers", offsetof(rm_job_spec_t, max_workers), 0, 0, 65536, 0, NULL},
    {"steps", offsetof(rm_job_spec_t, steps), 1, 0, RM__SAFE_INT, 0,
     "must be in 0..9007199254740992 (2^53; 0 = the default, 100)"},
    {"heartbeat_timeout_ms", offsetof(rm_job_spec_t, heartbeat_timeout_ms), 0, 100, 3600000,
     1, NULL},
    {"barrier_timeout_ms", offsetof(rm_job_spec_t, barrier_timeout_ms), 0, 100, 86400000, 1,
     NULL},
    {"max_restarts", offsetof(rm_job_spec_t, max_restarts), 0, 0, INT32_MAX, 0, NULL},
    {"backup_workers", offsetof(rm_job_spec_t, backup_workers), 0, 0, INT32_MAX, 0, NULL},
    {"checkpoint_every", offsetof(rm_job_spec_t, checkpoint_every), 1, 0, RM__SAFE_INT, 0,
     "must be in 0..9007199254740992 (2^53; 0 = never)"},
    {"aggregation.f", offsetof(rm_job_spec_t, aggregation_f), 0, 0, 65536, 0, NULL},
    {"aggregation.m", offsetof(rm_job_spec_t, aggregation_m), 0, 0, 65536, 0, NULL},
    {"aggregation.iterations", offsetof(rm_job_spec_t, aggregation_iterations), 0, 0, 1000000,
     0, NULL},
    {"max_staleness", offsetof(rm_job_spec_t, max_staleness), 0, 0, 64, 0, NULL},
    {"secure_aggregation.threshold", offsetof(rm_job_spec_t, secagg_threshold), 0, 0, 65536,
     0, NULL},
};

static rm_status_t check_ranges(const rm_job_spec_t *s, rm_coord_error_t *err)
{
  char msg[128];
  for (size_t i = 0; i < sizeof k_ranges / sizeof *k_ranges; i++) {
    const char *p = (const char *)s + k_ranges[i].off;
    int ok;
    if (k_ranges[i].u64) {
      uint64_t v;
      memcpy(&v, p, sizeof v);
      ok = (v == 0 && k_ranges[i].zero) ||
           (v >= (uint64_t)k_ranges[i].lo && v <= (uint64_t)k_ranges[i].hi);
    } else {
      int v;
      memcpy(&v, p, sizeof v);
      ok = (v == 0 && k_ranges[i].zero) || (v >= k_ranges[i].lo && v <= k_ranges[i].hi);
    }
    if (ok) continue;
    if (k_ranges[i].why) return bad(err, k_ranges[i].field, k_ranges[i].why);
    snprintf(msg, sizeof msg, "must be %s%lld..%lld", k_ranges[i].zero ? "0 (the default) or " : "in ",
             k_ranges[i].lo, k_ranges[i].hi);
    return bad(err, k_ranges[i].field, msg);
  }
  return RM_OK;
}

/* Straggler policies: backup_workers is b for "backup" (N +
 * b workers, a step takes the first N) and for "auto" (the same when it
 * mitigates; 0 = mitigate with a deadline), s for "coded" (s tolerated
 * stragglers; (s+1) must divide the world size); "stale" folds late
 * gradients instead (max_staleness, no backup workers). */
static rm_status_t check_straggler(const rm_job_spec_t *s, rm_coord_error_t *err)
{
  int world = s->world_size ? s->world_size : s->max_workers;
  int b = s->backup_workers;
  int stale = !strcmp(s->straggler_policy, "stale");
  if (stale && s->max_staleness < 1)
    return bad(err, "max_staleness", "straggler_policy stale needs 1 <= "
               "max_staleness <= 64: how many steps late a gradient may be "
               "folded in");
  if (!stale && s->max_staleness != 0)
    return bad(err, "max_staleness", "only for straggler_policy stale (must be "
               "0 or omitted)");
  if (stale && b != 0)
    return bad(err, "backup_workers", "straggler_policy stale needs "
               "backup_workers 0: a late worker's gradient is folded into a "
               "later step, no backup worker replaces it");
  if (!strcmp(s->straggler_policy, "auto") && b >= world)
    return bad(err, "backup_workers", "straggler_policy auto needs 0 <= "
               "backup_workers < world size (>= 1: mitigate with backup, 0: "
               "with a deadline)");
  if (!strcmp(s->straggler_policy, "backup") && (b < 1 || b >= world))
    return bad(err, "backup_workers", "straggler_policy backup needs "
               "1 <= backup_workers < world size");
  if (!strcmp(s->straggler_policy, "coded") &&
      (b < 1 || b >= world || world % (b + 1) != 0))
    return bad(err, "backup_workers", "straggler_policy coded needs the "
               "tolerated stragglers s = backup_workers >= 1 with (s+1) "
               "dividing the world size");
  return RM_OK;
}

static rm_status_t check_env(const rm_job_spec_t *s, rm_coord_error_t *err)
{
  char msg[200];
  const char *p = s->env;
  if (s->env_count < 0 || s->env_count > RM_COORD_ENV_MAX ||
      rm_job_spec_packed_len(s->env, sizeof s->env, s->env_count) < 0)
    return bad(err, "env", "at most 64 entries and 4096 bytes");
  for (int i = 0; i < s->env_count; i++, p = rm_job_spec_next(p)) {
    const char *eq = strchr(p, '=');
    size_t klen = eq ? (size_t)(eq - p) : strlen(p);
    int ok = eq && klen > 0 && (isalpha((unsigned char)p[0]) || p[0] == '_');
    for (size_t k = 1; ok && k < klen; k++)
      ok = isalnum((unsigned char)p[k]) || p[k] == '_';
    if (!ok) {
      snprintf(msg, sizeof msg, "entry %d: '%.40s' is not KEY=VALUE with a key "
               "of letters, digits and '_' not starting with a digit", i, p);
      return bad(err, "env", msg);
    }
    if (klen >= 11 && !strncmp(p, "RINGMASTER_", 11)) {
      snprintf(msg, sizeof msg, "key %.*s: RINGMASTER_* variables are set by "
               "the worker agent for the program; choose another name",
               (int)(klen > 64 ? 64 : klen), p);
      return bad(err, "env", msg);
    }
  }
  return RM_OK;
}

/* Command, env and workdir (the workload name: check_names). */
static rm_status_t check_command(const rm_job_spec_t *s, rm_coord_error_t *err)
{
  int cmd = !strcmp(s->workload, "command");
  if (s->command_argc < 0 || s->command_argc > RM_COORD_ARGV_MAX ||
      rm_job_spec_packed_len(s->command, sizeof s->command, s->command_argc) < 0)
    return bad(err, "command", "at most 64 arguments and 4096 bytes");
  if (cmd && s->command_argc == 0)
    return bad(err, "command", "required for workload command: the program "
               "and its arguments, e.g. [\"python3\", \"train.py\"]");
  if (cmd && !s->command[0])
    return bad(err, "command", "the program (first argument) must not be empty");
  if (!cmd && s->command_argc)
    return bad(err, "command", "only for workload command (the built-in "
               "workloads run inside ringmaster-worker)");
  if (!cmd && s->env_count)
    return bad(err, "env", "only for workload command");
  if (!TERMINATED(workdir))
    return bad(err, "workdir", "at most 255 bytes");
  if (!cmd && s->workdir[0])
    return bad(err, "workdir", "only for workload command");
  return check_env(s, err);
}

/* The rm_agg_config_t of a (validated) spec; RM_ERR_INVALID_ARG for an
 * unknown method name. Shared with recovery.c (core_int.h). */
rm_status_t rm__spec_agg_config(const rm_job_spec_t *s, rm_agg_config_t *cfg)
{
  rm_agg_config_init(cfg);
  if (!memchr(s->aggregation, 0, sizeof s->aggregation) ||
      rm_agg_method_parse(s->aggregation[0] ? s->aggregation : "mean",
                          &cfg->method) != RM_OK)
    return RM_ERR_INVALID_ARG;
  cfg->f = s->aggregation_f;
  cfg->m = s->aggregation_m;
  cfg->clip_norm = s->clip_norm;
  cfg->tau = s->aggregation_tau;
  cfg->iterations = s->aggregation_iterations;
  return RM_OK;
}

/* Which parameter rm_agg_check refuses: the first whose default changes
 * the verdict or the words; f when none does (the rule on n and f). */
static const char *agg_field(const rm_agg_config_t *cfg, int n, const char *why)
{
  char w2[140];
  for (int k = 0; k < 4; k++) {
    rm_agg_config_t t = *cfg;
    static const char *const names[] = {"aggregation.clip_norm", "aggregation.tau",
                                        "aggregation.iterations", "aggregation.m"};
    int same;
    if (k == 0) same = t.clip_norm == 0, t.clip_norm = 0;
    else if (k == 1) same = t.tau == 0, t.tau = 0;
    else if (k == 2) same = t.iterations == 0, t.iterations = 0;
    else same = t.m == 0, t.m = 0;
    if (same) continue;
    if (rm_agg_check(&t, n, w2, sizeof w2) == RM_OK || strcmp(w2, why))
      return names[k];
  }
  return "aggregation.f";
}

static rm_status_t check_aggregation(rm_job_spec_t *s, rm_coord_error_t *err)
{
  rm_agg_config_t cfg;
  char why[140], msg[200], names[128] = "";
  int elastic = s->world_size == 0, n = elastic ? s->min_workers : s->world_size;
  if (rm__spec_agg_config(s, &cfg) != RM_OK) {
    for (int i = 0; i < RM_AGG_COUNT; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
               i ? (i == RM_AGG_COUNT - 1 ? " or " : ", ") : "",
               rm_agg_method_name((rm_agg_method_t)i));
    snprintf(msg, sizeof msg, "must be %s", names);
    return bad(err, "aggregation.method", msg);
  }
  DEFAULT(aggregation, "mean");
  if ((cfg.method != RM_AGG_MEAN || cfg.clip_norm > 0) &&
      strcmp(s->straggler_policy, "none"))
    return bad(err, "aggregation.method", "a robust method or clip_norm combines every "
               "member's gradient each step, while straggler_policy backup, deadline, "
               "coded, stale and auto leave members out of steps: use one or the other");
  if (rm_agg_check(&cfg, n, why, sizeof why) == RM_OK) return RM_OK;
  snprintf(msg, sizeof msg, "%s (n = %s)", why,
           elastic ? "min_workers: an elastic job may form with that few"
                   : "world_size");
  return bad(err, agg_field(&cfg, n, why), msg);
}

/* Secure aggregation's defaults and rules (top of the file); after the
 * names, ranges and aggregation are checked. */
static rm_status_t check_secure(rm_job_spec_t *s, rm_coord_error_t *err)
{
  char msg[240];
  int elastic = s->world_size == 0;
  int world = elastic ? s->max_workers : s->world_size;
  int n_max = s->world_size > s->max_workers ? s->world_size : s->max_workers;
  int n_min = elastic ? s->min_workers : s->world_size;
  if (!TERMINATED(secagg_neighbours))
    return bad(err, "secure_aggregation.neighbours", "must be all or log (exact spelling)");
  if (s->secagg_bits == 0) {
    if (s->secagg_clip != 0 || s->secagg_scale != 0 || s->secagg_threshold != 0 ||
        s->secagg_neighbours[0])
      return bad(err, "secure_aggregation.bits", "0 turns secure aggregation off: give "
                 "bits 32 or 64 with clip, scale, threshold or neighbours");
    return RM_OK;
  }
  if (s->secagg_bits != 32 && s->secagg_bits != 64) {
    snprintf(msg, sizeof msg, "must be 32 or 64 (the masked sum is taken modulo "
             "2^bits), got %d", s->secagg_bits);
    return bad(err, "secure_aggregation.bits", msg);
  }
  if (s->secagg_clip == 0) s->secagg_clip = s->clip_norm > 0 ? s->clip_norm : 1.0;
  if (!isfinite(s->secagg_clip) || s->secagg_clip <= 0) {
    snprintf(msg, sizeof msg, "must be a finite number > 0 (the L2 clip before "
             "quantizing), got %g", s->secagg_clip);
    return bad(err, "secure_aggregation.clip", msg);
  }
  if (!isfinite(s->secagg_scale) || s->secagg_scale < 0) {
    snprintf(msg, sizeof msg, "must be a finite number >= 0 (0 = the largest power "
             "of two that cannot wrap), got %g", s->secagg_scale);
    return bad(err, "secure_aggregation.scale", msg);
  }
  /* every coordinate is at most clip*scale + 1 after stochastic rounding;
   * N of them must stay below half the ring (the sign bit) */
  if (s->secagg_scale > 0 &&
      !((double)n_max * (s->secagg_clip * s->secagg_scale + 1) < ldexp(1.0, s->secagg_bits - 1))) {
    snprintf(msg, sizeof msg, "%.10g too large: N*(clip*scale + 1) = %d*(%.10g*%.10g + 1) = "
             "%.10g must be < 2^%d = %.10g so that the sum of N inputs cannot wrap", s->secagg_scale, n_max,
             s->secagg_clip, s->secagg_scale,
             (double)n_max * (s->secagg_clip * s->secagg_scale + 1), s->secagg_bits - 1,
             ldexp(1.0, s->secagg_bits - 1));
    return bad(err, "secure_aggregation.scale", msg);
  }
  if (s->secagg_threshold == 0) s->secagg_threshold = n_min / 2 + 1 > 2 ? n_min / 2 + 1 : 2;
  if (s->secagg_threshold < 2 || s->secagg_threshold > world) {
    snprintf(msg, sizeof msg, "%d: must be in 2..%d (%s): a sum over one member is that "
             "member's input", s->secagg_threshold, world,
             elastic ? "max_workers" : "world_size");
    return bad(err, "secure_aggregation.threshold", msg);
  }
  if (n_min < s->secagg_threshold) {
    snprintf(msg, sizeof msg, "%d is more than min_workers %d: an elastic job may form "
             "with min_workers members, and no sum over fewer inputs than the threshold "
             "may be revealed (raise min_workers or lower the threshold)",
             s->secagg_threshold, n_min);
    return bad(err, "secure_aggregation.threshold", msg);
  }
  DEFAULT(secagg_neighbours, "all");
  if (strcmp(s->secagg_neighbours, "all") && strcmp(s->secagg_neighbours, "log"))
    return bad(err, "secure_aggregation.neighbours", "must be all or log (exact spelling)");
  if (strcmp(s->aggregation, "mean")) {
    snprintf(msg, sizeof msg, "%s cannot be combined with secure_aggregation: a robust "
             "method needs every member's plaintext gradient, and secure aggregation "
             "reveals only their sum (use mean, or drop secure_aggregation)", s->aggregation);
    return bad(err, "aggregation.method", msg);
  }
  if (strcmp(s->straggler_policy, "none")) {
    snprintf(msg, sizeof msg, "%s cannot be combined with secure_aggregation: a secure "
             "sum's masks cancel only over the whole membership; a dropped member is a "
             "re-formed generation (use none)", s->straggler_policy);
    return bad(err, "straggler_policy", msg);
  }
  if (strcmp(s->workload, "train") && strcmp(s->workload, "allreduce") &&
      strcmp(s->workload, "command")) {
    snprintf(msg, sizeof msg, "%s cannot be combined with secure_aggregation: it models "
             "compute time and sums no gradient (use train, allreduce or command)",
             s->workload);
    return bad(err, "workload", msg);
  }
  return RM_OK;
}

rm_status_t rm_job_spec_validate(rm_job_spec_t *s, rm_coord_error_t *err)
{
  if (err) err->field[0] = err->message[0] = 0;
  if (!TERMINATED(name) || !s->name[0])
    return bad(err, "name", "required, 1 to 63 characters");
  for (const char *p = s->name; *p; p++)
    if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
      return bad(err, "name", "only letters, digits, '.', '_' and '-'");
  rm_status_t st = check_ranges(s, err);
  if (st != RM_OK) return st;
  if (s->world_size > 0) {
    if ((s->min_workers && s->min_workers != s->world_size) ||
        (s->max_workers && s->max_workers != s->world_size))
      return bad(err, "min_workers", "give either world_size or min_workers "
                 "and max_workers, not both");
  } else {
    if (s->min_workers < 1) return bad(err, "world_size", RM__WORLD_WHY);
    if (s->max_workers < s->min_workers)
      return bad(err, "max_workers", "must be >= min_workers and <= 65536");
  }
  DEFAULT(algorithm, "auto");
  DEFAULT(dtype, "f32");
  DEFAULT(workload, "allreduce");
  DEFAULT(launcher, "local");
  DEFAULT(on_failure, "fail");
  DEFAULT(straggler_policy, "none");
  if (!TERMINATED(workload_options))
    return bad(err, "workload_options", "at most 511 bytes");
  st = check_names(s, err);
  if (st != RM_OK) return st;
  st = check_policy_workload(s, err);
  if (st != RM_OK) return st;
  st = check_command(s, err);
  if (st != RM_OK) return st;
  if (s->steps == 0) s->steps = 100;
  st = check_dataset(s, err);
  if (st != RM_OK) return st;
  st = check_straggler(s, err);
  if (st != RM_OK) return st;
  st = check_aggregation(s, err);
  if (st != RM_OK) return st;
  return check_secure(s, err);
}
