/*
 * straggler.h - per-job straggler detection from step reports (coordinator
 * module). Algorithm, invariants and defaults at the top of
 * straggler.c.
 *
 * One detector per job. The coordinator feeds every step report it accepts
 * and gets back at most one transition (flagged / unflagged) for the
 * reporting worker, which it turns into an event, the
 * `stragglers_flagged` gauge and the worker's `straggler` mark:
 *
 *   rm_straggler_config_t cfg;  rm_straggler_config_init(&cfg);
 *   rm_straggler_t *d;          rm_straggler_create(&cfg, &d);
 *   for each accepted report:
 *     rm_straggler_event_t ev;
 *     rm_straggler_report(d, &rep, &ev);
 *     if (ev.transition == RM_STRAGGLER_FLAGGED) ... event "straggler" ...
 *   worker left / lost:  rm_straggler_leave(d, worker_id, &ev);
 *   rm_straggler_destroy(d);
 *
 * Workers are keyed by the coordinator's stable worker id (not the rank,
 * which can change with the generation). A worker joins on its first report.
 *
 * Not thread-safe: call under the job's (coordinator state) lock. Memory is
 * allocated when a worker joins (its window arrays) and when the worker count
 * grows; a report from a known worker allocates nothing.
 */
#ifndef RM_COORDINATOR_STRAGGLER_H
#define RM_COORDINATOR_STRAGGLER_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

#define RM_STRAGGLER_MAX_WINDOW 64

typedef struct rm_straggler_config {
  int window;             /* W: reports per worker in its window (1..64); 10 */
  int min_slow;           /* M: flag when >= M of the last W reports are slow;
                             1..W; default 6 */
  double factor;          /* slow: compute > factor * ref median; >1; 1.5 */
  double mad_k;           /* ... and compute > median + mad_k * 1.4826*MAD;
                             >= 0; default 3 */
  double min_excess_ms;   /* ... and compute - median > this (absolute floor
                             against jitter of tiny steps); >= 0; 1.0 */
  double recover_factor;  /* fast again: compute <= recover_factor * median;
                             1 <= recover_factor <= factor; default 1.2 */
  int recover_steps;      /* unflag after this many consecutive fast
                             reports; >= 1; default 5 */
} rm_straggler_config_t;

typedef enum {
  RM_STRAGGLER_NONE = 0,     /* no change */
  RM_STRAGGLER_FLAGGED = 1,  /* became a straggler with this report */
  RM_STRAGGLER_UNFLAGGED = 2 /* recovered (or, from leave, left while flagged) */
} rm_straggler_transition_t;

typedef struct rm_straggler_report {
  uint64_t worker; /* stable worker id */
  uint64_t step;
  double compute_ms, comm_ms, wait_ms;
  double step_ms;  /* total; 0 = compute + comm + wait */
} rm_straggler_report_t;

typedef struct rm_straggler_event {
  uint64_t worker;
  uint64_t step;               /* of the report that caused it */
  rm_straggler_transition_t transition;
  double score;                /* compute window median / reference median */
  double compute_ms;           /* this worker's compute window median */
  double reference_ms;         /* peers' median of window medians */
  int slow_in_window;          /* slow reports among its last W */
} rm_straggler_event_t;

typedef struct rm_straggler_info {
  uint64_t worker;
  int flagged;
  double score;          /* 1.0 until a reference exists */
  int reports;           /* total accepted */
  int slow_in_window;
  double compute_ms, comm_ms, wait_ms, step_ms; /* window medians */
  double reference_ms;   /* the reference it was last compared with; 0 = none */
} rm_straggler_info_t;

typedef struct rm_straggler rm_straggler_t;

void rm_straggler_config_init(rm_straggler_config_t *cfg);
/* RM_ERR_INVALID_ARG naming nothing but refusing an out-of-range field;
 * errbuf (may be NULL) says which. */
rm_status_t rm_straggler_config_check(const rm_straggler_config_t *cfg,
                                      char *errbuf, size_t errlen);
/* cfg NULL = defaults. OUT *out on success. */
rm_status_t rm_straggler_create(const rm_straggler_config_t *cfg,
                                rm_straggler_t **out);
void rm_straggler_destroy(rm_straggler_t *d);

/* Feed one report. OUT *ev (may be NULL) is always written on RM_OK:
 * transition NONE, FLAGGED or UNFLAGGED for rep->worker. A report whose
 * step equals the worker's previous report's step is a duplicate and is
 * ignored (ev NONE). Negative or non-finite times: RM_ERR_INVALID_ARG. */
rm_status_t rm_straggler_report(rm_straggler_t *d,
                                const rm_straggler_report_t *rep,
                                rm_straggler_event_t *ev);

/* Forget a worker (left, lost, replaced). OUT *ev: UNFLAGGED if it was
 * flagged, so the gauge and the dashboard mark can be cleared.
 * RM_ERR_NOT_FOUND for an unknown worker. */
rm_status_t rm_straggler_leave(rm_straggler_t *d, uint64_t worker,
                               rm_straggler_event_t *ev);

/* Current view of one worker. RM_ERR_NOT_FOUND for an unknown worker. */
rm_status_t rm_straggler_get(const rm_straggler_t *d, uint64_t worker,
                             rm_straggler_info_t *out);
/* Up to cap workers' views, ordered by worker id. Returns how many were
 * written (the total is rm_straggler_workers). */
int rm_straggler_list(const rm_straggler_t *d, rm_straggler_info_t *out,
                      int cap);
/* Number of tracked workers / currently flagged ones. */
int rm_straggler_workers(const rm_straggler_t *d);
int rm_straggler_flagged(const rm_straggler_t *d);

#endif
