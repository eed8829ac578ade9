/*
 * session_live.c - how the coordinator knows a session is alive, and how a
 * session learns that the coordinator moved on.
 *
 * HEARTBEATS. A thread calls Heartbeat every heartbeat_interval_ms (the
 * coordinator's figure from Join) from the first formed generation until
 * leave or close, also while the caller waits for a decision or re-joins.
 *
 * SESSION STREAM. After the first Join answer a thread keeps a Watch call
 * open with the worker id (asking for no events), re-opened 500 ms after it
 * ends, cancelled only at close. If this process dies its kernel closes the
 * connection and the coordinator sees that call cancelled by the transport:
 * the worker is lost at once (coordinator/recovery.c detection source 2),
 * without waiting for the heartbeat timeout. RINGMASTER_SESSION_STREAM=0
 * turns it off (to measure the other detection sources).
 *
 * STALE (session_int.h invariant 2). Any answer saying the job's generation
 * moved on, the job ended, or FAILED_PRECONDITION / NOT_FOUND /
 * UNAUTHENTICATED about the CURRENT generation marks the session stale (a
 * heartbeat sent before a re-join and answered after it is about the old
 * one and ignored: it would abort the new communicator for nothing) and aborts the communicator with
 * RM_ERR_RECONFIGURED (RM_ERR_JOB_ENDED when the job ended), so a
 * collective blocked on peers returns at once with a status that says so.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/comm_int.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "session/session_int.h"

void rm__session_mark_stale(rm_session_t *s, int job_state, const char *why)
{
  pthread_mutex_lock(&s->mu);
  rm__session_mark_stale_locked(s, job_state, why);
  pthread_mutex_unlock(&s->mu);
}

void rm__session_mark_stale_gen(rm_session_t *s, uint64_t gen, int job_state,
                                const char *why)
{
  pthread_mutex_lock(&s->mu);
  /* an answer about a generation we already left (a heartbeat sent before
   * the re-join, answered after it) says nothing about this one */
  if (gen == s->generation) rm__session_mark_stale_locked(s, job_state, why);
  pthread_mutex_unlock(&s->mu);
}

void rm__session_mark_stale_locked(rm_session_t *s, int job_state, const char *why)
{
  if (!s->broke_wall_ms) {
    s->broke_wall_ms = rm__wall_ms();
    s->broke_gen = s->generation;
  }
  if (!s->stale) RM_INFO("coordinator moved on: %s", why ? why : "");
  s->stale = 1;
  if (job_state >= 0) s->job_state = job_state;
  if (why && !s->reason[0]) snprintf(s->reason, sizeof s->reason, "%s", why);
  if (s->comm) {
    int ended = s->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED;
    char words[sizeof s->reason + 64];
    snprintf(words, sizeof words, "%s: %s",
             ended ? "the job ended" : "the coordinator re-formed the job",
             s->reason);
    rm__comm_abort_with(s->comm, ended ? RM_ERR_JOB_ENDED : RM_ERR_RECONFIGURED,
                        words);
  }
}

int rm__session_is_stale(rm_session_t *s)
{
  pthread_mutex_lock(&s->mu);
  int stale = s->stale;
  pthread_mutex_unlock(&s->mu);
  return stale;
}

/* ---- heartbeats ---- */
int rm__session_heartbeat(rm_session_t *s)
{
  Ringmaster__V1__HeartbeatRequest q = RINGMASTER__V1__HEARTBEAT_REQUEST__INIT;
  Ringmaster__V1__HeartbeatResponse *r = NULL;
  char msg[256];
  pthread_mutex_lock(&s->mu);
  RM__SESSION_IDS(q, s);
  q.step = s->steps_done;
  pthread_mutex_unlock(&s->mu);
  int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/Heartbeat", &q.base,
                        &ringmaster__v1__heartbeat_response__descriptor,
                        (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  if (rc == RM__G_OK) {
    if (r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
      rm__session_mark_stale_gen(s, q.generation, r->job_state,
                                 r->reason[0] ? r->reason : "job finished");
    else if (r->generation != q.generation)
      rm__session_mark_stale_gen(s, q.generation, -1, "new generation");
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else if (rc == RM__G_FAILED_PRECONDITION || rc == RM__G_NOT_FOUND ||
             rc == RM__G_UNAUTHENTICATED) {
    rm__session_mark_stale_gen(s, q.generation, -1, msg);
  } else {
    RM_DEBUG("heartbeat: status %d: %s", rc, msg);
  }
  return rc;
}

static void deadline_in(struct timespec *ts, int ms)
{
  clock_gettime(CLOCK_REALTIME, ts);
  int64_t ns = ts->tv_nsec + (int64_t)ms * 1000000;
  ts->tv_sec += ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
}

static void *hb_thread(void *arg)
{
  rm_session_t *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->hb_stop) {
    struct timespec ts;
    deadline_in(&ts, s->hb_interval_ms);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    if (s->hb_stop) break;
    pthread_mutex_unlock(&s->mu);
    rm__session_heartbeat(s);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void rm__session_hb_start(rm_session_t *s)
{
  if (s->hb_on) return;
  s->hb_stop = 0;
  s->hb_on = pthread_create(&s->hb, NULL, hb_thread, s) == 0;
}

void rm__session_hb_stop(rm_session_t *s)
{
  if (!s->hb_on) return;
  pthread_mutex_lock(&s->mu);
  s->hb_stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->hb, NULL);
  s->hb_on = 0;
}

/* ---- session stream ---- */
static void *stream_thread(void *arg)
{
  rm_session_t *s = arg;
  char msg[256];
  pthread_mutex_lock(&s->mu);
  while (!s->stream_stop) {
    Ringmaster__V1__WatchRequest q = RINGMASTER__V1__WATCH_REQUEST__INIT;
    RM__SESSION_IDS(q, s);
    q.after_seq = UINT64_MAX / 2; /* a session: no events wanted */
    pthread_mutex_unlock(&s->mu);
    rm__ctl_stream_t *st = rm__ctl_stream_open(s->ctl, "/ringmaster.v1.Worker/Watch",
                                               &q.base);
    pthread_mutex_lock(&s->mu);
    s->stream = st;
    if (st && s->stream_stop) rm__ctl_stream_cancel(st);
    pthread_mutex_unlock(&s->mu);
    if (st) {
      int rc = rm__ctl_stream_wait(st, msg, sizeof msg);
      RM_DEBUG("session stream ended: status %d: %s", rc, msg);
    }
    pthread_mutex_lock(&s->mu);
    s->stream = NULL;
    rm__ctl_stream_free(st);
    if (s->stream_stop) break;
    struct timespec ts;
    deadline_in(&ts, 500);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void rm__session_stream_start(rm_session_t *s)
{
  if (s->stream_on || !s->worker_id) return;
  if (!rm__env_int("RINGMASTER_SESSION_STREAM", 1)) return; /* bench knob */
  s->stream_stop = 0;
  s->stream_on = pthread_create(&s->stream_thread, NULL, stream_thread, s) == 0;
}

void rm__session_stream_stop(rm_session_t *s)
{
  if (!s->stream_on) return;
  pthread_mutex_lock(&s->mu);
  s->stream_stop = 1;
  if (s->stream) rm__ctl_stream_cancel(s->stream);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->stream_thread, NULL);
  s->stream_on = 0;
}

/* ---- failures ---- */
void rm__session_report_failure(rm_session_t *s, rm_status_t st)
{
  Ringmaster__V1__ReportFailureRequest q =
      RINGMASTER__V1__REPORT_FAILURE_REQUEST__INIT;
  Ringmaster__V1__ReportFailureResponse *r = NULL;
  char msg[256];
  RM__SESSION_IDS(q, s);
  q.failed_rank = s->comm ? rm_comm_failed_peer(s->comm) : -1;
  q.status = (char *)rm_status_name(st);
  q.error = (char *)(s->comm ? rm_comm_last_error(s->comm) : "");
  q.step = s->steps_done;
  int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/ReportFailure", &q.base,
                        &ringmaster__v1__report_failure_response__descriptor,
                        (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  if (rc == RM__G_OK) {
    RM_INFO("reported %s naming rank %d: %s", q.status, q.failed_rank,
            r->accepted ? "declared lost" : "not declared lost");
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else {
    RM_INFO("ReportFailure: status %d: %s", rc, msg);
  }
}
