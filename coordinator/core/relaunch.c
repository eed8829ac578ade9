/*
 * relaunch.c - the launcher's part in recovery: worker
 * process exits as a detection source, and relaunching one worker for
 * on_failure replace.
 *
 * EXIT -> LOSS (detection source 4, next to recovery.c's three). The local
 * launcher reaps its children every 200 ms; a child that died (signal or
 * non-zero status) is reported with rm_coord_worker_exited(job, index). The
 * worker it was is found by its launch index: the agent sends
 * RINGMASTER_LAUNCH_INDEX/RINGMASTER_LAUNCH_WORLD as rank/world hints, which
 * the coordinator keeps as w->launch_index (stored, so it survives a
 * coordinator restart), so w->launch_index == index. If that worker is still live (joining or a member
 * of the current generation) it is lost now, with the launcher's words as
 * the reason; the job's on_failure decides exactly as for any other source.
 * An exit is never a job failure by itself: the launcher fails a job only
 * when every worker process is gone and the job is not finished
 * (coordinator/launch/coord_bridge.c).
 *
 * RELAUNCH (replace). recovery.c re-forms at G+1 with the survivors and a
 * target of world_size. If no standby completed the group at once, it
 * queues the job here (rm__recovery_queue_relaunch, under lock) on the
 * post-commit queue (commit.c), which calls the job's launcher relaunch()
 * after COMMIT:
 *
 *   launcher has relaunch   -> event "relaunch" (one more worker process
 *   (local, slurm)             (slurm: a one-task sbatch), next launch
 *                              index; it joins, loads the last
 *                              complete checkpoint, gets live parameters
 *                              from a survivor: train_workload.c)
 *   relaunch() fails        -> event "relaunch_failed" with its message
 *   k8s                     -> event "relaunch": Kubernetes does it (the
 *                              Indexed Job's backoffLimit = max_restarts
 *                              makes a new pod for the lost index: k8s.c)
 *   launcher none           -> event "relaunch_unsupported": start one by
 *                              hand or keep standbys
 *
 * In the last two cases the group completes only if someone starts a
 * worker; otherwise the re-formation deadline fails the job (job.c). Each
 * re-formation counts against max_restarts whether or not it relaunched.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

void rm__recovery_queue_relaunch(rm_coord_t *c, rm__job_t *j)
{
  rm__after_commit(c, j, RM__AFTER_RELAUNCH);
}

void rm__relaunch_outcome(rm_coord_t *c, uint64_t id, const char *launcher,
                          const char *err)
{
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, id);
  if (j && !rm_job_state_terminal(j->info.state)) {
    if (!err && !strcmp(launcher, "k8s"))
      rm__event(c, j, "relaunch", -1, "Kubernetes starts the replacement: the "
                "Indexed Job (backoffLimit %d) makes a new pod for the lost index",
                j->info.spec.max_restarts);
    else if (!err)
      rm__event(c, j, "relaunch", -1, "launcher %s starts a replacement worker",
                launcher);
    else
      rm__event(c, j, "relaunch_failed", -1, "launcher %s could not start a "
                "replacement worker: %.180s", launcher, err);
  }
  rm__commit(c);
}

rm_status_t rm_coord_worker_exited(rm_coord_t *c, uint64_t id, int index,
                                   const char *what)
{
  rm_status_t st = RM_ERR_NOT_FOUND;
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, id);
  for (size_t i = 0; j && i < j->nw && !rm_job_state_terminal(j->info.state);
       i++) {
    rm__worker_t *w = &j->w[i];
    if (w->launch_index != index || !rm__worker_live(j, w)) continue;
    char why[300];
    snprintf(why, sizeof why, "its process exited (launcher: %.240s)",
             what ? what : "no detail");
    rm__job_worker_lost(c, j, w, why);
    st = RM_OK;
    break;
  }
  rm__commit(c);
  return st;
}

rm_status_t rm_coord_job_note(rm_coord_t *c, uint64_t id, const char *kind,
                              const char *message)
{
  rm_status_t st = RM_ERR_NOT_FOUND;
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, id);
  if (j && rm_job_state_terminal(j->info.state)) {
    st = RM_ERR_DENIED;
  } else if (j) {
    rm__event(c, j, kind, -1, "%s", message);
    st = RM_OK;
  }
  rm_status_t cst = rm__commit(c);
  return st == RM_OK && cst != RM_OK ? cst : st;
}
