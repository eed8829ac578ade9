/*
 * coord_types.h - the coordinator's vocabulary: the records a job, a
 * worker, an event, a barrier and a step report are described by (specs,
 * states, infos), with the pure helpers on them (defaults, validation,
 * names, packing). The bottom of the coordinator's layers (model.h builds
 * its in-memory state from these) and part of its interface (coord.h
 * includes it; api/ reads them): no function here takes the coordinator.
 * Strings in records are fixed-size, NUL-terminated arrays, so every record
 * can be copied with '='.
 */
#ifndef RM_COORDINATOR_COORD_TYPES_H
#define RM_COORDINATOR_COORD_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ringmaster/ringmaster.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors naming a field ---- */
typedef struct rm_coord_error {
  char field[48];    /* spec field at fault ("world_size"), "" if none */
  char message[256]; /* a sentence for humans */
} rm_coord_error_t;

/* ---- job spec ---- */
#define RM_COORD_NAME_MAX 64
#define RM_COORD_OPTS_MAX 512
/* Command jobs (workload "command"): argv and environment are
 * packed as NUL-terminated strings back to back, with a count (empty
 * strings are legal argv entries, so the count, not a double NUL, ends the
 * list). Iterate with rm_job_spec_next(). */
#define RM_COORD_ARGV_MAX 64       /* arguments, argv[0] included */
#define RM_COORD_ARGV_BYTES 4096   /* packed, NULs included */
#define RM_COORD_ENV_MAX 64        /* "KEY=VALUE" entries */
#define RM_COORD_ENV_BYTES 4096    /* packed, NULs included */
#define RM_COORD_WORKDIR_MAX 256   /* 255 bytes + NUL */
/* Event messages and job reasons: room for a program's last stderr lines. */
#define RM_COORD_TEXT_MAX 1024

typedef struct rm_job_spec {
  char name[RM_COORD_NAME_MAX]; /* required: [A-Za-z0-9._-]{1,63} */
  /* Fixed-size job: world_size > 0 and min/max 0 (or equal to it).
   * Elastic job: world_size 0, 1 <= min_workers <= max_workers; the group
   * forms with max_workers, or with >= min_workers once no worker joined for
   * a settle time. Up to 65536. */
  int world_size;
  int min_workers;
  int max_workers;
  char algorithm[16];            /* rm_algo_parse_exact names, stored
                                    canonical ("hd" for an alias); "" = "auto" */
  char dtype[8];                 /* exact dtype names (rm_types.c); "" = "f32" */
  char workload[32];             /* "allreduce" (default), "train", ... */
  char workload_options[RM_COORD_OPTS_MAX]; /* "key=value,..." for the workload */
  uint64_t steps;                /* steps to run; 0 = 100 */
  char launcher[16];             /* "local" (default), "slurm", "k8s", "none" */
  int heartbeat_timeout_ms;      /* 0 = coordinator default; >= 100 */
  int barrier_timeout_ms;        /* 0 = coordinator default; >= 100 */
  char on_failure[16];           /* "fail" (default), "shrink", "replace" */
  int max_restarts;              /* for "replace"; >= 0 */
  char straggler_policy[16];     /* "none" (default), "backup", "deadline",
                                    "coded", "stale", "auto" */
  int backup_workers;            /* for "backup", "coded", "auto"; >= 0 */
  uint64_t checkpoint_every;     /* steps between checkpoints; 0 = never */
  /* workload "command" only (required exactly then): the program every
   * worker's agent runs, no shell; env "KEY=VALUE" added to its
   * environment (keys [A-Za-z_][A-Za-z0-9_]*, never RINGMASTER_*); workdir
   * its working directory ("" = the agent's). */
  int command_argc;
  char command[RM_COORD_ARGV_BYTES];
  int env_count;
  char env[RM_COORD_ENV_BYTES];
  char workdir[RM_COORD_WORKDIR_MAX];
  /* Aggregation: how each step's gradient is combined by
   * rm_aggregate (include/ringmaster/aggregation.h holds the methods and
   * their rules). aggregation: rm_agg_method_name names, "" = "mean";
   * aggregation_f: tolerated Byzantine workers; aggregation_m: multi_krum
   * selections (0 = n - f); clip_norm: per-worker L2 threshold before any
   * method (0 = off); aggregation_tau / aggregation_iterations:
   * centered_clip (0 = defaults). Checked with rm_agg_check at submit for
   * the smallest group the job may form with (world_size, or min_workers
   * for an elastic job); under on_failure shrink a re-formation below the
   * rule fails the job (recovery.c). */
  char aggregation[16];
  int aggregation_f;
  int aggregation_m;
  double clip_norm;
  double aggregation_tau;
  int aggregation_iterations;
  /* Bitwise reproducibility: 1 = every all-reduce of the job
   * uses an algorithm that is a function of the message size and the world
   * size only (the communicator's `auto` takes the fixed cost model, never
   * the one calibrated from timing), with the segmenting of the workers'
   * environment, and reduces in the algorithm's fixed order; policies whose
   * participants depend on timing (backup, deadline, coded) are refused.
   * Two runs of one spec on one world then end on the same parameters, also
   * across a worker replaced (on_failure replace) or a coordinator restart;
   * a shrink changes the world and so the grouping of the sums. */
  int deterministic;
  /* Bounded staleness: straggler_policy "stale" only, 1..64 (0
   * otherwise). A worker left out of step s by the deadline keeps its
   * gradient and folds it into a later step, at most max_staleness steps
   * late (the worker does the folding; the coordinator's gate is the
   * deadline gate). */
  int max_staleness;
  /* Secure aggregation: the REST object "secure_aggregation"
   * flattened. secagg_bits 0 = off; 32 (default when the object is given)
   * or 64: the masked sum is taken in Z_{2^bits}. secagg_clip: the L2 clip
   * before quantizing (default aggregation.clip_norm when > 0, else 1).
   * secagg_scale: fixed-point scale (0 = the worker's default, the largest
   * power of two with N*(clip*scale+1) <= 2^(bits-2)). secagg_threshold:
   * the fewest members any sum is revealed over (default max(2, n/2 + 1),
   * n = world_size, or min_workers for an elastic job); a re-formation
   * below it fails the job (recovery.c). secagg_neighbours: "all" (every
   * pair masks, default) or "log" (O(log N) neighbours, SecAgg+). The
   * coordinator never sees a gradient: it relays public key material
   * through barrier payloads (core/barrier.c). */
  int secagg_bits;
  double secagg_clip;
  double secagg_scale;
  int secagg_threshold;
  char secagg_neighbours[8];
} rm_job_spec_t;

/* Zero the spec and fill defaults (launcher "local", on_failure "fail", ...). */
void rm_job_spec_init(rm_job_spec_t *s);
/* Bytes used by `count` packed strings in buf[cap] (NULs included), or -1
 * when they run past cap (a list that was never packed right). Inline:
 * api/'s parsers use them without linking the coordinator. */
static inline long rm_job_spec_packed_len(const char *buf, size_t cap, int count)
{
  size_t used = 0;
  if (count < 0) return -1;
  for (int i = 0; i < count; i++) {
    const char *z = used < cap ? (const char *)memchr(buf + used, 0, cap - used) : NULL;
    if (!z) return -1;
    used = (size_t)(z - buf) + 1;
  }
  return (long)used;
}
/* Append item (n bytes, no NUL inside) to a packed list buf[cap] holding
 * *count strings: 0, or -1 when it contains a NUL or does not fit (nothing
 * written). */
static inline int rm_job_spec_pack(char *buf, size_t cap, int *count,
                                   const char *item, size_t n)
{
  long used = rm_job_spec_packed_len(buf, cap, *count);
  if (used < 0 || memchr(item, 0, n) || (size_t)used + n + 1 > cap) return -1;
  memcpy(buf + used, item, n);
  buf[used + (long)n] = '\0';
  ++*count;
  return 0;
}
/* The string after p in a packed list. */
static inline const char *rm_job_spec_next(const char *p)
{
  while (*p) p++;
  return p + 1;
}
/* A job's env values are secret (docs/security.md): every read shows the
 * keys with the value replaced by this mask. */
#define RM_JOB_ENV_MASK "***"
/* The packed env list in[count] with every "KEY=VALUE" made "KEY=***" into
 * out[cap], out zeroed by the caller. Values shorter than the mask make the
 * list longer, so a list that no longer fits is cut at the first entry that
 * does not (a read then shows fewer keys, never a value). Returns the
 * entries written. */
static inline int rm_job_spec_env_mask(const char *in, int count, char *out, size_t cap)
{
  const char *p = in;
  int n = 0;
  for (int i = 0; i < count; i++, p = rm_job_spec_next(p)) {
    const char *eq = strchr(p, '=');
    size_t kl = eq ? (size_t)(eq - p) : strlen(p);
    char item[RM_COORD_ENV_BYTES];
    if (kl + sizeof RM_JOB_ENV_MASK + 1 > sizeof item) break;
    memcpy(item, p, kl);
    memcpy(item + kl, "=" RM_JOB_ENV_MASK, sizeof RM_JOB_ENV_MASK + 1);
    if (rm_job_spec_pack(out, cap, &n, item, strlen(item)) != 0) break;
  }
  return n;
}
/* Check every field; RM_ERR_INVALID_ARG with err->field set on the first bad
 * one. Empty strings are replaced by their defaults in *s (hence not const).
 * Every on_failure policy (fail, shrink, replace) and straggler policy
 * (none, backup, deadline, coded, stale, auto) is implemented
 * (coordinator/recovery.c, core/step_gate.c); the checks are on their
 * parameters: min_workers for shrink, max_restarts >= 0, backup needs 1 <=
 * backup_workers < world size, coded needs s = backup_workers >= 1 with
 * (s+1) dividing the world size, stale needs 1 <= max_staleness <= 64 and
 * backup_workers 0, auto 0 <= backup_workers < world size; which policy a
 * workload may use is the table at the top of core/spec.c.
 * aggregation: a known method, and rm_agg_check's rule for n = world_size
 * (fixed-size job) or n = min_workers (elastic job); the field named is
 * "aggregation.method", ".f", ".m", ".clip_norm", ".tau" or ".iterations".
 * secure_aggregation (secagg_bits != 0): the rules at the top of
 * core/spec.c; the field named is "secure_aggregation.<member>", or two
 * fields for a combination ("aggregation.method" with a robust method). */
rm_status_t rm_job_spec_validate(rm_job_spec_t *s, rm_coord_error_t *err);

/* ---- job state machine (diagram in coordinator/job.c) ----
 *   pending -> forming -> running -> succeeded | failed | cancelled
 *   running -> forming (membership change: a member lost under shrink or
 *   replace, or a coordinator restart) */
typedef enum {
  RM_JOB_PENDING = 0,   /* submitted, no worker joined yet */
  RM_JOB_FORMING = 1,   /* workers joining; ranks not yet assigned */
  RM_JOB_RUNNING = 2,   /* a generation is published and workers step */
  RM_JOB_SUCCEEDED = 3, /* every member left after its last step */
  RM_JOB_FAILED = 4,    /* reason says why (worker lost, worker error, ...) */
  RM_JOB_CANCELLED = 5,
  RM_JOB_STATE_COUNT
} rm_job_state_t;

const char *rm_job_state_name(rm_job_state_t s); /* "running"; "unknown" */
/* Parse "pending" ... "cancelled"; RM_ERR_INVALID_ARG otherwise. */
rm_status_t rm_job_state_parse(const char *s, rm_job_state_t *out);
static inline int rm_job_state_terminal(rm_job_state_t s)
{
  return s >= RM_JOB_SUCCEEDED;
}

/* Straggler mitigation of a job under straggler_policy auto. */
typedef enum {
  RM_MITIGATION_OFF = 0,      /* synchronous steps */
  RM_MITIGATION_BACKUP = 1,   /* a step takes the first world - b workers */
  RM_MITIGATION_DEADLINE = 2, /* a step waits for the median arrival + slack */
} rm_mitigation_t;
/* "off", "backup", "deadline"; "off" for anything else. */
const char *rm_mitigation_name(rm_mitigation_t m);

typedef struct rm_job_info {
  uint64_t id;
  rm_job_spec_t spec;       /* as validated (defaults filled) */
  rm_job_state_t state;
  char token[72];           /* the worker token (secret: show once). Never
                             * stored: the store keeps a verifier and a
                             * sealed copy (store/store_key.c) and unseals
                             * it for rm_coord_job_get; "" in job lists */
  char token_verifier[65];  /* hex SHA-256 of token, what workers are
                             * checked against (not secret) */
  char reason[RM_COORD_TEXT_MAX]; /* why it failed/was cancelled; "" otherwise */
  uint64_t generation;      /* 0 until the first group formed */
  int world;                /* members of the current generation, 0 if none */
  int workers_joined;       /* workers known in the current/forming group */
  int workers_alive;        /* ... of which not lost/left */
  uint64_t step;            /* steps every member has completed (min) */
  int restarts;             /* re-formations so far */
  /* Secure aggregation: generations re-formed after a loss (each
   * redoes its first step with fresh masks over the survivors) and the
   * members those re-formations lost, in all. Stored with the job. */
  int secure_recovered_steps;
  int secure_dropouts;
  int64_t created_ms;       /* wall clock, ms since epoch */
  int64_t started_ms;       /* first generation formed; 0 if never */
  int64_t finished_ms;      /* terminal; 0 if not */
  int64_t updated_ms;       /* last state change */
  /* straggler_policy auto: what the steps do about late workers
   * now, and the 0-based step from which (0 when off). Memory only: "off"
   * for any other policy, for a job read back from the store, after a
   * restart and in a new generation (core/step_gate.c). */
  rm_mitigation_t mitigation;
  uint64_t mitigation_step;
  /* A command job's program's own number of steps, from its step reports
   * (rm_session_set_total_steps); 0 unknown. Memory only (the next report
   * after a restart tells it again). rm_job_steps_total() reads it. */
  uint64_t steps_program;
} rm_job_info_t;

/* The total a job's progress is shown against: the program's own for a
 * command job (0 = unknown: show the step alone; the spec's "steps" is
 * the program's only if it reads it), the spec's steps otherwise. */
static inline uint64_t rm_job_steps_total(const rm_job_info_t *j)
{
  if (j->steps_program) return j->steps_program;
  return strcmp(j->spec.workload, "command") == 0 ? 0 : j->spec.steps;
}

/* ---- workers ---- */
typedef enum {
  RM_WORKER_JOINING = 0, /* joined, waiting for the group to form */
  RM_WORKER_RUNNING = 1, /* member of the current generation */
  RM_WORKER_LOST = 2,    /* missed its heartbeat deadline / call cancelled */
  RM_WORKER_LEFT = 3,    /* left cleanly after its last step */
  RM_WORKER_FAILED = 4,  /* left reporting an error */
  RM_WORKER_STOPPED = 5, /* still joining or running when its job ended
                            (failed or cancelled; a waiting standby when it
                            succeeded): told to stop, no longer alive */
  RM_WORKER_STATE_COUNT
} rm_worker_state_t;

const char *rm_worker_state_name(rm_worker_state_t s);

typedef struct rm_worker_info {
  uint64_t id;            /* unique per coordinator db */
  uint64_t job_id;
  int rank;               /* -1 until ranks are assigned */
  char host[128];
  char data_addr[160];    /* data-plane "host:port" */
  char transports[256];   /* what its data plane offers ("" = tcp) */
  /* Transports of its pairs with the current members, e.g. "shm 3, tcp 4"
   * (the pair rule of common/rm_transports.h); "" when not a member or the
   * generation has more than 1,024 members (not computed). */
  char links[64];
  char devices[256];      /* what the agent reported ("cpu", "cuda:0 ...") */
  rm_worker_state_t state;
  uint64_t generation;    /* generation it last joined */
  int64_t last_heartbeat_ms;  /* wall clock of its last call */
  int64_t ms_since_heartbeat; /* now - last call, ms */
  uint64_t step;          /* last step reported */
  double step_ms;         /* duration of that step (compute+comm+wait) */
  double compute_ms, comm_ms, wait_ms; /* its phases */
  int straggler;          /* flagged by straggler detection */
  /* The launcher's index of the process (RINGMASTER_LAUNCH_INDEX of the
   * local launcher, SLURM_PROCID, Kubernetes' completion index), -1 when the
   * worker was started by hand. Its log is worker-<launch_index>.log. Equal
   * to the rank only in the first generation: after a shrink or a
   * replacement (a relaunched worker gets the next index) they differ. */
  int launch_index;
  /* Byzantine suspect (core/suspect.c): excluded by the job's
   * robust aggregation in >= M of its last W steps. Stays set on a worker
   * that left or was lost while suspected (the evidence stays visible). */
  int suspect;
} rm_worker_info_t;

/* ---- events ---- */
typedef struct rm_event {
  uint64_t seq;        /* global, strictly increasing, never reused */
  uint64_t job_id;     /* 0 for coordinator-wide events */
  int64_t time_ms;     /* wall clock */
  char kind[32];       /* "job_submitted", "job_state", "worker_joined",
                          "worker_lost", "generation", "barrier_broken", ...*/
  int rank;            /* -1 if not about one rank */
  uint64_t generation;
  char message[RM_COORD_TEXT_MAX]; /* a sentence for humans */
} rm_event_t;

/* ---- barriers ---- */
typedef enum {
  RM_BARRIER_OPEN = 0,
  RM_BARRIER_RELEASED = 1,
  RM_BARRIER_BROKEN = 2
} rm_barrier_state_t;

typedef struct rm_barrier_member {
  int rank;
  uint64_t step;               /* its last reported step */
  rm_worker_state_t state;
  int64_t ms_since_heartbeat;
} rm_barrier_member_t;

typedef struct rm_barrier_info {
  char name[RM_COORD_NAME_MAX];
  uint64_t generation;
  rm_barrier_state_t state;
  int64_t opened_ms, deadline_ms, closed_ms; /* wall clock; closed 0 if open */
  int arrived, expected;
  char reason[160];            /* why broken ("deadline", "rank 2 lost") */
  size_t n_missing;
  rm_barrier_member_t *missing; /* ranks not arrived (inside the block) */
} rm_barrier_info_t;

/* ---- step timings ---- */
typedef struct rm_step_metric {
  char name[RM_METRIC_NAME_MAX];
  double value;
} rm_step_metric_t;

typedef struct rm_step_sample {
  int rank;
  uint64_t step;
  uint64_t generation;
  int64_t time_ms;           /* when reported, wall clock */
  double compute_ms, comm_ms, wait_ms;
  double loss, accuracy;     /* NaN when not meaningful */
  uint64_t allreduce_bytes;
  /* the named metrics reported with it (ringmaster.h rm_metric_t rules) */
  uint32_t n_metrics;
  rm_step_metric_t metrics[RM_METRICS_MAX];
} rm_step_sample_t;

/* ---- listing jobs ---- */
typedef struct rm_job_filter {
  int state;       /* rm_job_state_t, or -1 for any */
  uint64_t offset; /* jobs to skip (newest first) */
  uint32_t limit;  /* max jobs returned; 0 = 100; capped at 1000 */
} rm_job_filter_t;

#ifdef __cplusplus
}
#endif

#endif /* RM_COORDINATOR_COORD_TYPES_H */
