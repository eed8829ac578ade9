/*
 * auto.h - the state machine of straggler_policy "auto" (coordinator module).
 * Design, verdict rules and the state diagram in auto.c.
 *
 * A job under `auto` runs plain synchronous steps until some worker is late
 * in M of its last W steps; the coordinator then mitigates (backup when the
 * spec has backup_workers >= 1, else a deadline) until every worker is on
 * time again. The coordinator's step gate (core/step_gate.c) feeds this
 * module one verdict vector per decided step and reconfigures its rm_gate
 * when the mode switches:
 *
 *   rm_auto_config_t cfg;  rm_auto_config_init(&cfg, world, backup_workers);
 *   rm_auto_t *a;  rm_auto_create(&cfg, &a);
 *   thr = rm_auto_threshold(median_compute_ms);       per decided step
 *   rm_auto_verdicts(a, arrive_ms, members, thr, late);
 *   rm_auto_observe(a, late, &ev);                     the same step
 *   if (ev.transition != RM_AUTO_SAME) ...             switch at the next step
 *   rm_auto_reset(a);                                  new generation
 *
 * Time is whatever milliseconds the caller passes (no clock is read), so the
 * module is deterministic and testable. Not thread-safe (the coordinator
 * calls it under its lock); allocation only in rm_auto_create.
 */
#ifndef RM_COORDINATOR_AUTO_H
#define RM_COORDINATOR_AUTO_H

#include <stdint.h>

#include "ringmaster/ringmaster.h"

#define RM_AUTO_WINDOW_MAX 64 /* W: one bit per step per rank */

typedef enum {
  RM_AUTO_SYNC = 0,     /* not mitigating: RM_GATE_ALL */
  RM_AUTO_BACKUP = 1,   /* mitigating: RM_GATE_FIRST_K, k = world - backup */
  RM_AUTO_DEADLINE = 2, /* mitigating: RM_GATE_DEADLINE (deadline's slack) */
} rm_auto_mode_t;

typedef struct rm_auto_config {
  int world;    /* ranks, 1..65536 */
  int window;   /* W: verdicts kept per rank, 1..RM_AUTO_WINDOW_MAX */
  int min_late; /* M: late in >= M of the last W turns mitigation on, 1..W */
  int backup;   /* backup_workers b: >= 1 mitigates with backup, 0 deadline */
} rm_auto_config_t;

typedef enum {
  RM_AUTO_SAME = 0, /* no switch */
  RM_AUTO_ON = 1,   /* mitigate from the next step (ev.mode says how) */
  RM_AUTO_OFF = 2,  /* synchronous steps again from the next step */
} rm_auto_transition_t;

typedef struct rm_auto rm_auto_t;

typedef struct rm_auto_event {
  rm_auto_transition_t transition;
  rm_auto_mode_t mode; /* the mode from the next step on */
  int rank;            /* ON: the rank with the most late steps (lowest on a
                          tie); OFF / SAME: -1 */
  int late;            /* ON: its late steps; OFF: the most late steps of any
                          rank (<= M/3) */
  int of;              /* the verdicts the counts are over: min(W, steps
                          observed since the last reset) */
} rm_auto_event_t;

/* W = 10, M = 6 (rm_straggler_config_init's window and min_slow). */
void rm_auto_config_init(rm_auto_config_t *cfg, int world, int backup);

/* RM_ERR_INVALID_ARG for a config out of the ranges above. */
rm_status_t rm_auto_create(const rm_auto_config_t *cfg, rm_auto_t **out);
void rm_auto_destroy(rm_auto_t *a);

/* Synchronous, every window empty (a new generation). */
void rm_auto_reset(rm_auto_t *a);

/* The mode the steps run in now. */
rm_auto_mode_t rm_auto_mode(const rm_auto_t *a);

/* The lateness verdicts of one decided step in the current mode (rules at
 * the top of auto.c). arrive_ms: world arrival times, NaN = did not arrive;
 * members: the gate's member mask (world bytes; may be NULL while
 * synchronous, where every rank is a member); threshold_ms: how far after
 * the median arrival counts as late (rm_auto_threshold). OUT: late[world],
 * 1 = late. */
void rm_auto_verdicts(rm_auto_t *a, const double *arrive_ms,
                      const uint8_t *members, double threshold_ms,
                      uint8_t *late);

/* The lateness threshold of a step: max(1 ms, half the median over the
 * members of their last reported compute_ms); NaN when the median is NaN
 * (no member reported a step yet: the caller then gives no verdicts). */
double rm_auto_threshold(double median_compute_ms);

/* Record one decided step's verdicts (late: world bytes) and apply the
 * rules; OUT *ev (may be NULL) says whether the mode switches from the next
 * step. */
void rm_auto_observe(rm_auto_t *a, const uint8_t *late, rm_auto_event_t *ev);

#endif
