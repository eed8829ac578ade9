/*
 * command.c - the coordinator's side of command jobs: what the
 * agent's Attach and ReportExit calls (proto/ringmaster/v1/messages.proto;
 * the handlers are rpc/rpc_command.c) do to the job.
 *
 * For workload "command" the launchers start ringmaster-worker as for any
 * job, but the agent does not join: it supervises the user's program,
 * which joins itself through the session API with the agent's launch index
 * as its rank hint, so the program's worker row carries launch_index ==
 * the agent's. The agent's calls never touch membership or liveness:
 *
 *   Attach(job, token, launch_index, host, master_port): every agent's
 *     first call, whatever the workload (it learns the workload here)
 *     -> spec (command, env, workdir), job state and reason, world size,
 *        master_addr/master_port (launch index 0's host and the port it
 *        found free there: the torchrun rendezvous of the first generation;
 *        kept in memory, first come, never replaced; "" / 0 until index 0
 *        attached: the others poll), joined (a worker with this launch
 *        index exists in the job, any state, any generation).
 *
 *   ReportExit(job, token, launch_index, exit_code, signal, stderr_tail,
 *              reason) -> job state. Always an event "program_exited" (with
 *              the last stderr lines unless the program exited 0 after it
 *              left the job or the job ended);
 *   then, by the worker w with that launch index (the live one if any,
 *   else the newest):
 *
 *     job already over                 -> event only
 *     no w (never joined)              -> job FAILED: which worker, the
 *                                         status or the agent's reason,
 *                                         the last stderr lines
 *     w live, first formation (gen 0),
 *       not yet a member               -> job FAILED (same words): the group
 *                                         can never complete without it
 *     w member or joining, status != 0
 *       or a signal                    -> w lost (rm__job_worker_lost, as
 *                                         rm_coord_worker_exited): the
 *                                         job's on_failure decides
 *     w member, exit 0, not left       -> w lost: "exited 0 without leaving
 *                                         the job"
 *     w left / lost / failed already   -> event only
 *
 *   Idempotence: the local launcher reports the agent's own exit right
 *   after (rm_coord_worker_exited); the worker is lost by then, so that
 *   call finds no live worker and answers NOT_FOUND, counting nothing
 *   twice. A repeated ReportExit only adds an event.
 */
#define _GNU_SOURCE /* strsignal */
#include <stdio.h>
#include <string.h>

#include "core/core_int.h"

#define TAIL_MAX 600 /* bytes of stderr tail kept in a reason */

/* The worker of launch index `index`: the live one, else the newest. */
static rm__worker_t *by_index(rm__job_t *j, int index)
{
  rm__worker_t *found = NULL;
  for (size_t i = 0; i < j->nw; i++) {
    rm__worker_t *w = &j->w[i];
    if (w->launch_index != index) continue;
    if (rm__worker_live(j, w)) return w;
    found = w;
  }
  return found;
}

/* "exited with status N" / "killed by signal N (Name)". */
static void status_words(char *buf, size_t len, int code, int sig)
{
  if (sig > 0)
    snprintf(buf, len, "killed by signal %d (%s)", sig, strsignal(sig));
  else
    snprintf(buf, len, "exited with status %d", code);
}

/* The last TAIL_MAX bytes of tail, starting at a line, trailing newlines
 * dropped; "" when none. */
static void tail_lines(char *buf, size_t len, const char *tail)
{
  size_t n = tail ? strlen(tail) : 0;
  while (n && (tail[n - 1] == '\n' || tail[n - 1] == '\r')) n--;
  const char *p = tail ? tail : "";
  if (n > TAIL_MAX) {
    const char *s = p + n - TAIL_MAX, *nl = memchr(s, '\n', TAIL_MAX);
    p = nl ? nl + 1 : s;
    n = (size_t)(tail + n - p);
  }
  snprintf(buf, len, "%.*s", (int)n, p);
}

/* The last line of a tail (already trimmed by tail_lines). */
static const char *last_line(const char *t)
{
  const char *nl = strrchr(t, '\n');
  return nl ? nl + 1 : t;
}

/* snprintf's result n: mark a reason cut to fit with "..." at its end. */
static void mark_cut(char *buf, size_t len, int n)
{
  if (n >= (int)len && len > 4) memcpy(buf + len - 4, "...", 4);
}

rm_status_t rm__command_exited(rm_coord_t *c, rm__job_t *j, int index,
                                 int code, int sig, const char *stderr_tail,
                                 const char *reason)
{
  char st[96], tail[TAIL_MAX + 1], why[RM_COORD_TEXT_MAX], agent[320] = "";
  rm__worker_t *w = by_index(j, index);
  status_words(st, sizeof st, code, sig);
  tail_lines(tail, sizeof tail, stderr_tail);
  if (reason && *reason) snprintf(agent, sizeof agent, "%.300s; ", reason);
  int failed = code != 0 || sig > 0;
  /* The event quotes the program's stderr only when the exit is news: a
   * failure, or an exit 0 that ends a worker that never joined or had not
   * left. A program that left and exited 0 finished; its stderr is its own
   * (warnings at most: the library is quiet by default, rm_log.h). */
  int quote = failed || !w ||
              (!rm_job_state_terminal(j->info.state) && rm__worker_live(j, w));
  rm__event(c, j, "program_exited", w ? w->rank : -1,
            "worker launch index %d (rank %d): %sprogram %s%s%s", index,
            w ? w->rank : -1, agent, st, quote && tail[0] ? "; last stderr:\n" : "",
            quote ? tail : "");
  if (rm_job_state_terminal(j->info.state)) return RM_OK;
  if (!w || (rm__worker_live(j, w) && !rm__worker_member(j, w) &&
             j->info.generation == 0)) {
    mark_cut(why, sizeof why,
             snprintf(why, sizeof why, "worker launch index %d: its program %s "
                      "(%s%s)%s%s", index, w ? "ended before the group formed"
                      : "never joined the job", agent, st,
                      tail[0] ? "; last stderr:\n" : "", tail));
    if (w) rm__job_worker_lost(c, j, w, st);
    rm__job_set_state(c, j, RM_JOB_FAILED, why);
    return RM_OK;
  }
  if (!rm__worker_live(j, w)) return RM_OK; /* left or lost already: the event says it */
  if (failed)
    mark_cut(why, sizeof why, snprintf(why, sizeof why, "its program %s%s%.400s", st,
                                       tail[0] ? "; stderr: " : "", last_line(tail)));
  else if (w->state == RM_WORKER_RUNNING)
    snprintf(why, sizeof why, "its program exited 0 without leaving the job");
  else
    snprintf(why, sizeof why, "its program exited 0 while joining");
  rm__job_worker_lost(c, j, w, why);
  return RM_OK;
}

rm_status_t rm_coord_program_exited(rm_coord_t *c, uint64_t id, int index,
                                    int exit_code, int sig,
                                    const char *stderr_tail,
                                    const char *reason, rm_job_state_t *state)
{
  rm_status_t rc = RM_ERR_NOT_FOUND;
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, id);
  if (j) {
    rc = rm__command_exited(c, j, index, exit_code, sig, stderr_tail, reason);
    if (state) *state = j->info.state;
  }
  rm__commit(c);
  return rc;
}


int rm__command_attach(rm__job_t *j, int launch_index, const char *host,
                       uint32_t master_port)
{
  size_t hl = host ? strlen(host) : 0;
  int joined = 0;
  if (launch_index == 0 && hl && hl < sizeof j->master_addr && master_port &&
      !j->master_port && !strcmp(j->info.spec.workload, "command")) {
    memcpy(j->master_addr, host, hl + 1);
    j->master_port = master_port;
  }
  for (size_t i = 0; i < j->nw && launch_index >= 0; i++)
    joined |= j->w[i].launch_index == launch_index;
  return joined;
}
