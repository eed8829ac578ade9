/*
 * decide.h - the per-step participant gate of the straggler policies
 * (coordinator module). Design and state machine in decide.c.
 *
 * Under `backup`, `deadline` and `coded` the coordinator fixes which ranks
 * contribute to each step; every rank then runs the masked all-reduce
 * (worker/aggregate/aggregate.h) over exactly that set, and late ranks are
 * told they were dropped for the step. The gate is that decision, fed with
 * "rank r's gradient is ready at time t" events:
 *
 *   rm_gate_config_t cfg = { .policy = RM_GATE_FIRST_K, .world = 10, .k = 8 };
 *   rm_gate_t *g;  rm_gate_create(&cfg, &g);
 *   rm_gate_reset(g, step);                            at the step's start
 *   rm_gate_arrive(g, rank, now_ms, &state);           per "ready" message
 *   rm_gate_poll(g, now_ms, &state, &wake_ms);         timer (deadline)
 *   if (state == RM_GATE_DECIDED) members = rm_gate_members(g, &k);
 *
 * Time is whatever monotonic milliseconds the caller passes (no clock is
 * read here), so the gate is deterministic and testable. Not thread-safe;
 * allocation only in rm_gate_create.
 */
#ifndef RM_COORDINATOR_STRAGGLER_DECIDE_H
#define RM_COORDINATOR_STRAGGLER_DECIDE_H

#include <stdint.h>

#include "ringmaster/ringmaster.h"

typedef enum {
  RM_GATE_ALL = 0,      /* `none`: wait for every rank */
  RM_GATE_FIRST_K = 1,  /* `backup`: the first k ranks to arrive */
  RM_GATE_DEADLINE = 2, /* `deadline`: those in by median arrival + slack */
  RM_GATE_CODED = 3,    /* `coded`: as soon as every coding group of s+1
                           consecutive ranks has an arrival */
} rm_gate_policy_t;

typedef struct rm_gate_config {
  rm_gate_policy_t policy;
  int world;        /* ranks, 1..65536 */
  int k;            /* FIRST_K: 1 <= k <= world (world - backup workers) */
  double slack_ms;  /* DEADLINE: >= 0, after the median arrival */
  int s;            /* CODED: tolerated stragglers, (s+1) | world */
} rm_gate_config_t;

typedef enum {
  RM_GATE_WAIT = 0,    /* no decision yet */
  RM_GATE_DECIDED = 1, /* the member set is fixed (by this call or before) */
  RM_GATE_LATE = 2     /* this arrival came after the decision: dropped */
} rm_gate_state_t;

typedef struct rm_gate rm_gate_t;

rm_status_t rm_gate_create(const rm_gate_config_t *cfg, rm_gate_t **out);
void rm_gate_destroy(rm_gate_t *g);

/* Start a new step (forgets arrivals and the decision). */
void rm_gate_reset(rm_gate_t *g, uint64_t step);

/* Rank `rank` is ready at now_ms. OUT *state: WAIT, DECIDED (the decision
 * is made, possibly by this arrival; rank is a member iff it arrived before
 * or at the decision) or LATE (decided earlier without it). A second
 * arrival of the same rank in a step changes nothing. RM_ERR_INVALID_ARG
 * for a rank out of range. */
rm_status_t rm_gate_arrive(rm_gate_t *g, int rank, double now_ms,
                           rm_gate_state_t *state);

/* Check the deadline at now_ms. OUT *state; OUT *wake_ms (may be NULL):
 * the time at which a poll could decide (the deadline), or -1 when only an
 * arrival can change anything. */
void rm_gate_poll(rm_gate_t *g, double now_ms, rm_gate_state_t *state,
                  double *wake_ms);

/* The member mask (world bytes, 1 = contributes) once decided, else NULL.
 * OUT *count (may be NULL): members. Borrowed until the next reset. */
const uint8_t *rm_gate_members(const rm_gate_t *g, int *count);

/* DEADLINE: change slack_ms (>= 0) for the step under way and the next
 * ones; a deadline already passed stays passed. RM_ERR_INVALID_ARG for a
 * negative or NaN slack or another policy. */
rm_status_t rm_gate_set_slack(rm_gate_t *g, double slack_ms);

/* Step of the last reset. */
uint64_t rm_gate_step(const rm_gate_t *g);

#endif
