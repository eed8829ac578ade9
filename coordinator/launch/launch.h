/*
 * launch.h - how the coordinator starts the workers of a job (module interface).
 *
 * A launcher is a const ops table (conventions 8 in docs/architecture.md), chosen by the job spec's
 * `launcher` field through rm__launcher_find():
 *
 *   local  the workers are child processes of the coordinator on this host:
 *          fork/exec of ringmaster-worker, one per rank, stdout+stderr in
 *          <log_dir>/worker-<i>.log, PIDs tracked, each in its own process
 *          group. add starts one more (index n, n+1, ...: replacements). cancel = SIGTERM to every group, SIGKILL once the grace
 *          period has passed (done by a later poll). poll reaps with
 *          waitpid(pid, WNOHANG) on our own PIDs only and reports exits.
 *   slurm  writes <log_dir>/job.sbatch (#SBATCH lines + `srun ringmaster-worker
 *          ...`, mode 0600: it holds the token), submits it with
 *          `sbatch --parsable`, keeps the Slurm job id; a refusal fails start
 *          with sbatch's own message. cancel = `scancel ID` (Slurm itself
 *          sends SIGTERM, then SIGKILL after KillWait). poll asks `squeue`,
 *          then `sacct` when squeue no longer knows the job, at most every
 *          poll_interval_ms (cached in between), since each call forks.
 *   k8s    renders the worker manifests (Secret with the token, headless
 *          Service, Indexed Job: completions == parallelism == world, rank
 *          hint from JOB_COMPLETION_INDEX) — what `ringmaster k8s-manifest
 *          JOB` prints. start writes them to <log_dir>/k8s-workers.yaml for
 *          the user to `kubectl apply`; it never talks to a cluster, so the
 *          job's processes are outside its reach: cancel is NULL and poll
 *          says EXTERNAL (membership alone tells how the job goes).
 *   none   the user starts the workers (e.g. `srun -n 8 ringmaster-worker
 *          ...` in their own allocation). start/poll only; poll = EXTERNAL.
 *
 * Worker command line, for every launcher:
 *   <worker> --coordinator ADDR --job ID --token T [--workload W] [extra...]
 * local also sets RINGMASTER_LAUNCH_INDEX=i and RINGMASTER_LAUNCH_WORLD=n in
 * the worker's environment (hints; the coordinator assigns ranks).
 *
 * Handle lifecycle (one per launched job):
 *
 *   rm__launch_start() --> STARTED --poll--> RUNNING/PENDING/EXTERNAL
 *        |                   |  \--all exited--> SUCCEEDED | FAILED
 *        |                   +--rm__launch_cancel()--> CANCELLING --exited--> CANCELLED
 *        +--error: no handle, message in err (e.g. sbatch's stderr)
 *   rm__launch_destroy(): frees the handle; it does NOT stop workers (cancel
 *   first). A local handle destroyed with live children leaves them running.
 *
 * Threading: a handle is used by one thread at a time (the coordinator's job
 * loop). No call installs signal handlers; the coordinator must not set
 * SIGCHLD to SIG_IGN (that would auto-reap and lose exit codes). local's
 * child runs only async-signal-safe calls between fork and exec, so starting
 * workers from a multi-threaded coordinator (gRPC threads) is safe.
 * slurm's start/poll/cancel run sbatch/squeue/scancel with a deadline
 * (cmd_timeout_ms); they block for that long at worst.
 *
 * Worker binary: spec.worker_path, else $RINGMASTER_WORKER_BIN, else
 * ringmaster-worker next to the running binary (dirname of /proc/self/exe),
 * else the one in this build tree (RM_LAUNCH_BUILD_WORKER, set by CMake).
 */
#ifndef RM_COORDINATOR_LAUNCH_H
#define RM_COORDINATOR_LAUNCH_H

#include <stdio.h>
#include <sys/types.h>

#include "ringmaster/ringmaster.h"

typedef enum {
  RM_LAUNCH_PENDING = 0, /* submitted, not running yet (Slurm queue) */
  RM_LAUNCH_RUNNING,     /* at least one worker process is alive */
  RM_LAUNCH_EXTERNAL,    /* processes not ours to see (k8s, none) */
  RM_LAUNCH_CANCELLING,  /* cancel sent, processes still alive */
  RM_LAUNCH_SUCCEEDED,   /* every worker exited 0 / Slurm COMPLETED */
  RM_LAUNCH_FAILED,      /* a worker failed / Slurm FAILED, TIMEOUT... */
  RM_LAUNCH_CANCELLED    /* cancelled and everything is gone */
} rm_launch_state_t;

const char *rm__launch_state_name(rm_launch_state_t s);
/* 1 for SUCCEEDED, FAILED, CANCELLED. */
int rm__launch_state_final(rm_launch_state_t s);

/* What to launch; every string is borrowed for the duration of the call. */
typedef struct {
  const char *job_id;      /* required: coordinator's job id */
  const char *job_name;    /* optional, for Slurm/k8s names */
  const char *token;       /* required: the job's join token */
  const char *coordinator; /* required: HOST:PORT the workers dial */
  int world;               /* required: number of workers, >= 1 */
  const char *workload;    /* optional: --workload NAME */
  const char *const *extra_args; /* optional, NULL-terminated, appended */
  const char *worker_path; /* optional: see "Worker binary" above */
  const char *log_dir;     /* required for local/slurm/k8s start: per-job folder,
                              created if missing */
  int grace_ms;            /* local cancel: SIGTERM -> SIGKILL (0: 10000) */
  /* slurm */
  const char *slurm_partition;   /* optional #SBATCH --partition */
  int slurm_time_limit_min;      /* optional #SBATCH --time (0: none) */
  const char *const *slurm_sbatch_args; /* optional extra #SBATCH lines' args */
  int cmd_timeout_ms;            /* sbatch/squeue/scancel deadline (0: 30000) */
  const char *slurm_relay;       /* optional: the `ringmaster` binary on the nodes;
                                    the batch job then runs `<it> relay` on every
                                    node and the tasks join through it (slurm.c) */
  int poll_interval_ms;          /* slurm poll cache (0: 2000) */
  /* k8s */
  const char *k8s_image;         /* optional (default "ringmaster:latest") */
  const char *k8s_namespace;     /* optional (default: none, kubectl's) */
  int k8s_replacements;          /* pods the Indexed Job may replace (its
                                    backoffLimit): max_restarts of an
                                    on_failure replace job, else 0 */
} rm_launch_spec_t;

/* Per-worker view for the API and dashboard (local only; others return
 * RM_ERR_UNSUPPORTED from rm__launch_worker). */
typedef struct {
  pid_t pid;
  int exited;      /* 1 once reaped */
  int exit_code;   /* when exited and not signalled */
  int term_signal; /* signal that killed it, or 0 */
  const char *log_path; /* borrowed from the handle */
} rm_launch_worker_t;

typedef struct rm__launch rm__launch_t;

/* The contract every launcher implements. start must not leave anything
 * behind when it fails (kill what it started). poll must not block beyond
 * cmd_timeout_ms and writes a human-readable reason for FAILED into msg.
 * cancel is NULL when the launcher owns no processes; it must not block on
 * the workers' exit (a later poll observes it). */
typedef struct rm__launcher_ops {
  const char *name;
  rm_status_t (*start)(const rm_launch_spec_t *spec, rm__launch_t **out,
                       char *err, size_t errlen);
  rm_status_t (*poll)(rm__launch_t *l, rm_launch_state_t *state, char *msg,
                      size_t msglen);
  rm_status_t (*cancel)(rm__launch_t *l, char *err, size_t errlen);
  rm_status_t (*worker)(rm__launch_t *l, int index, rm_launch_worker_t *out);
  /* Optional (NULL: RM_ERR_UNSUPPORTED): start ONE more worker of a running
   * launch with the same command line and the next launch index (OUT
   * *index), for on_failure replace. local: one more child, log
   * worker-<index>.log. slurm/k8s: not supported (a one-task sbatch or a
   * pod would need its own lifecycle; the coordinator says so in an event). */
  rm_status_t (*add)(rm__launch_t *l, int *index, char *err, size_t errlen);
  /* Text that describes/reproduces the launch: local = the command lines,
   * slurm = the batch script, k8s = the manifests. May be NULL. */
  rm_status_t (*render)(const rm_launch_spec_t *spec, FILE *out, char *err,
                        size_t errlen);
  void (*destroy)(rm__launch_t *l);
} rm__launcher_ops_t;

extern const rm__launcher_ops_t rm__launcher_local;
extern const rm__launcher_ops_t rm__launcher_slurm;
extern const rm__launcher_ops_t rm__launcher_k8s;
extern const rm__launcher_ops_t rm__launcher_none;

/* By spec name ("local", "slurm", "k8s", "none"); NULL or "" = local.
 * Returns NULL for an unknown name: the job spec is invalid. */
const rm__launcher_ops_t *rm__launcher_find(const char *name);
/* Comma-separated list of valid names, for error messages. */
const char *rm__launcher_names(void);

/* Validate spec for this launcher without launching anything: the check the
 * coordinator runs before accepting a job. Names the field in err. */
rm_status_t rm__launch_validate(const rm__launcher_ops_t *ops,
                                const rm_launch_spec_t *spec, char *err,
                                size_t errlen);

/* Wrappers: callers use these, never ops->x() (conventions 8 in docs/architecture.md). */
rm_status_t rm__launch_start(const rm__launcher_ops_t *ops,
                             const rm_launch_spec_t *spec, rm__launch_t **out,
                             char *err, size_t errlen);
rm_status_t rm__launch_poll(rm__launch_t *l, rm_launch_state_t *state,
                            char *msg, size_t msglen);
rm_status_t rm__launch_cancel(rm__launch_t *l, char *err, size_t errlen);
rm_status_t rm__launch_worker(rm__launch_t *l, int index,
                              rm_launch_worker_t *out);
rm_status_t rm__launch_add(rm__launch_t *l, int *index, char *err,
                           size_t errlen);
/* 1 when the handle's launcher can add a worker (ops->add != NULL). */
int rm__launch_can_add(const rm__launcher_ops_t *ops);
rm_status_t rm__launch_render(const rm__launcher_ops_t *ops,
                              const rm_launch_spec_t *spec, FILE *out,
                              char *err, size_t errlen);
/* Poll every 20 ms until a final state or timeout_ms (then RM_ERR_TIMEOUT
 * with the last state in *state). For tests and coordinator shutdown. */
rm_status_t rm__launch_wait(rm__launch_t *l, int timeout_ms,
                            rm_launch_state_t *state, char *msg, size_t msglen);
void rm__launch_destroy(rm__launch_t *l);
const rm__launcher_ops_t *rm__launch_ops(const rm__launch_t *l);
/* Slurm job id ("1234") for slurm handles, NULL otherwise. Borrowed. */
const char *rm__launch_external_id(const rm__launch_t *l);

/* Resolve the worker binary (see above) into buf; RM_ERR_NOT_FOUND with a
 * message listing what was tried when nothing executable exists. */
rm_status_t rm__launch_worker_path(const rm_launch_spec_t *spec, char *buf,
                                   size_t len, char *err, size_t errlen);

#endif
