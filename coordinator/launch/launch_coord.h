/*
 * launch_coord.h - glue between the coordinator (coord.h) and the launchers.
 *
 * The coordinator registers the launchers with one call at start-up:
 *
 *   rm_launch_coord_options_t lo;  rm_launch_coord_options_init(&lo);
 *   lo.coord = c;  lo.job_fail = rm_coord_job_fail;  lo.log_dir = "...";
 *   rm_launch_coord_t *lc;  rm_launch_coord_create(&lo, &lc);
 *   rm_launch_coord_register(lc, c, rm_coord_register_launcher);
 *   ...
 *   rm_launch_coord_shutdown(lc, 1);   cancel local workers, stop watching
 *   rm_coord_close(c);  rm_launch_coord_destroy(lc, 0);
 *
 * For every job the coordinator asks to start (rm_coord_launcher_t.start),
 * the bridge builds an rm_launch_spec_t from the job (id, token, world =
 * world_size or max_workers, workload) and starts it through the job's
 * launcher; the per-job folder is <log_dir>/job-<id>. A monitor thread polls
 * every live handle every 200 ms (slurm polls squeue at most every 2 s).
 * One worker process dying is NOT a job failure: it is reported with
 * worker_exited(coord, id, index, "worker 1 (pid P) killed by signal 9 ...")
 * as a member loss, and the job's on_failure policy (fail, shrink, replace)
 * decides. Only when a launch ends FAILED (every worker process gone, one
 * failed) before the coordinator saw the job end does it call
 * job_fail(coord, id, reason) so the job fails with the launcher's reason.
 * relaunch (on_failure replace): local starts one more worker process with
 * the next launch index; slurm sbatches a one-task job with it
 * (replace.sbatch); k8s answers RM_OK and starts nothing: the Indexed Job
 * it rendered has backoffLimit = max_restarts, so Kubernetes makes a new pod
 * for the lost index. stop (job became terminal): a job that
 * succeeded gets grace_ms to exit by itself, any other is cancelled at once
 * (local: SIGTERM then SIGKILL after grace_ms; slurm: scancel).
 *
 * job_fail is called from the monitor thread with no bridge lock held;
 * start/stop never call into the coordinator and stop never blocks (it only
 * queues), so the coordinator may call stop with its own lock held. start
 * forks (local) or runs sbatch (slurm, up to cmd_timeout_ms): call it without
 * the coordinator lock, as coord.c's run_launches does.
 *
 * The bridge does not link the coordinator: the two coordinator functions it
 * needs are passed in (job_fail, register), so rm_launch stays a leaf library.
 */
#ifndef RM_COORDINATOR_LAUNCH_COORD_H
#define RM_COORDINATOR_LAUNCH_COORD_H

#include <stdio.h>

#include "coord.h"
#include "launch.h"

typedef struct {
  const char *log_dir;        /* base folder; default "ringmaster-logs" */
  const char *worker_path;    /* NULL: see launch.h "Worker binary" */
  const char *advertise_addr; /* address workers dial, instead of the bound
                                 one (needed when bound to 0.0.0.0 for Slurm
                                 nodes or pods); NULL = coord_addr */
  int grace_ms;               /* 0 = 10000 */
  const char *slurm_partition;
  int slurm_time_limit_min;
  const char *slurm_relay;    /* NULL: none; else rm_launch_spec_t.slurm_relay */
  const char *k8s_image;
  const char *k8s_namespace;
  rm_coord_t *coord;          /* passed back to job_fail / worker_exited */
  rm_status_t (*job_fail)(rm_coord_t *c, uint64_t id, const char *reason);
  /* A worker process died (signal or non-zero exit) while the job was not
   * being stopped: pass rm_coord_worker_exited (the job's on_failure policy
   * decides). NULL: exits are not reported; the coordinator's own
   * detection (heartbeats, streams, survivors' reports) still acts. */
  rm_status_t (*worker_exited)(rm_coord_t *c, uint64_t id, int index,
                               const char *what);
  /* LOG STORAGE (coord_bridge.c): the job's log folder stopped or started
   * taking writes; pass rm_coord_job_note (an event on the job). NULL: the
   * log line only. */
  rm_status_t (*job_note)(rm_coord_t *c, uint64_t id, const char *kind,
                          const char *message);
} rm_launch_coord_options_t;

typedef struct rm_launch_coord rm_launch_coord_t;

void rm_launch_coord_options_init(rm_launch_coord_options_t *o);
/* Copies the options (strings too) and starts the monitor thread. */
rm_status_t rm_launch_coord_create(const rm_launch_coord_options_t *o,
                                   rm_launch_coord_t **out, char *err,
                                   size_t errlen);
/* Calls reg(c, l) for "local", "slurm" and "k8s" (pass
 * rm_coord_register_launcher). */
rm_status_t rm_launch_coord_register(rm_launch_coord_t *b, rm_coord_t *c,
                                     rm_status_t (*reg)(rm_coord_t *,
                                                        const rm_coord_launcher_t *));
/* Stops the monitor; with cancel_running, cancels what still runs and waits
 * up to grace_ms + 5 s for it to go. Afterwards start() answers
 * RM_ERR_UNAVAILABLE and stop() does nothing, so the coordinator may still
 * call them while it closes. Call before rm_coord_close(). Idempotent. */
void rm_launch_coord_shutdown(rm_launch_coord_t *b, int cancel_running);
/* Shutdown (if not done) and free. Call after rm_coord_close(), when the
 * coordinator can no longer call start/stop. NULL is a no-op. */
void rm_launch_coord_destroy(rm_launch_coord_t *b, int cancel_running);

/* Launches being monitored (not yet final). */
int rm_launch_coord_active(rm_launch_coord_t *b);
/* <log_dir>/job-<id>/worker-<index>.log (local and slurm). */
void rm_launch_coord_log_path(const rm_launch_coord_t *b, uint64_t job_id,
                              int index, char *buf, size_t len);
/* The same as folder and file name (ctx = the rm_launch_coord_t): what the
 * REST API's log endpoint opens (rm_api_options_t.log_location). 0 ok, -1
 * when a buffer is too small. */
int rm_launch_coord_log_location(void *ctx, uint64_t job_id, int index, char *dir,
                                 size_t dirlen, char *file, size_t filelen);

/* The spec a job launches with; strings point into job, b and buf. */
void rm_launch_coord_spec(const rm_launch_coord_t *b, const rm_job_info_t *job,
                          const char *coord_addr, char *buf, size_t len,
                          rm_launch_spec_t *spec);

/* `ringmaster k8s-manifest JOB`: the worker manifests of a stored job.
 * image/ns may be NULL (defaults). */
rm_status_t rm_launch_k8s_manifest(const rm_job_info_t *job,
                                   const char *coord_addr, const char *image,
                                   const char *ns, FILE *out, char *err,
                                   size_t errlen);

#endif
