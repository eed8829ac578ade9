/*
 * step_engine.h - the straggler step engine: the one place where a step of
 * any workload or session program meets its job's straggler policy
 * . Design, invariants and the stale protocol at the top of
 * step_engine.c.
 *
 * Used by the built-in workloads (worker/train/straggler_step.c for `train`,
 * synthetic_workload.c, agent/wl_allreduce.c) and by the session API's
 * rm_session_allreduce_step (session_step.c), so `none`, `backup`,
 * `deadline`, `coded`, `stale` and `auto` mean the same thing everywhere.
 * What a workload cannot honour is refused at submit
 * (coordinator/core/spec.c), never ignored.
 *
 * Simulated stragglers, the workloads' test and benchmark knob, are
 * worker/train/slow.c (options of train and synthetic).
 *
 * Not thread-safe: one thread drives one rm__sp_t.
 */
#ifndef RM_SESSION_STEP_ENGINE_H
#define RM_SESSION_STEP_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

/* ---- the policy engine ---- */
enum {
  RM__SP_NONE = 0, /* synchronous: every rank, every step */
  RM__SP_BACKUP,   /* first world - b arrivals (coordinator decides) */
  RM__SP_DEADLINE, /* arrivals by median + slack (coordinator decides) */
  RM__SP_CODED,    /* gradient coding: one arrival per group suffices */
  RM__SP_STALE,    /* late gradients folded into a later step, <= k late */
  RM__SP_AUTO      /* synchronous until a straggler is seen, then backup or
                      deadline (the coordinator switches; the worker side
                      is that of deadline) */
};

/* The StepGate call (agent/workload.h rm_step_gate_fn): 1 decided, 0 not
 * yet, 2 not yet and only an arrival decides it, < 0 failed. */
typedef int (*rm__sp_gate_fn)(void *ctx, uint64_t step, int ready,
                              int wait_ms, uint8_t *members, int *dropped);

typedef struct rm__sp {
  int kind;            /* RM__SP_* */
  int rank, world;
  int s;               /* coded: tolerated stragglers */
  int k;               /* stale: max_staleness */
  int spin;            /* simulated compute busy-waits instead of sleeping */
  rm__sp_gate_fn gate;
  void *ctx;
  uint8_t *members;    /* world: the decided mask of the current step */
  int nmembers;
  double wait_ms;      /* parked at the gate during the current step */
  /* stale: the gradient this rank still owes (see step_engine.c) */
  int pending;         /* 1 = a gradient of step pending_from is owed */
  uint64_t pending_from;
  double left_ms;      /* simulated compute it still needs */
  double *hdr;         /* world + 1: [0] rows, [1 + r] = from_r + 1 or 0 */
  /* statistics over every generation this engine ran (summaries) */
  uint64_t steps;        /* steps taken */
  uint64_t my_dropped;   /* steps this rank did not contribute to in time */
  uint64_t folded;       /* stale gradients (staleness >= 1) folded in */
  uint64_t max_seen;     /* largest staleness folded */
  int min_contrib, max_contrib; /* contributors per step; 0 before a step */
} rm__sp_t;

/* NULL, "" and "none" = RM__SP_NONE; -1 for an unknown name. */
int rm__sp_kind_parse(const char *name);
const char *rm__sp_kind_name(int kind);

/* (Re)start the engine for a generation: policy by name, this rank, the
 * world, coded's s, stale's k, the gate and its context (gate NULL forces
 * none). A pending stale gradient of an older generation is dropped (the
 * parameters were re-synchronised; the gradient was computed on others).
 * The statistics survive. RM_ERR_INVALID_ARG for an unknown name or a bad
 * s / k, RM_ERR_NOMEM. */
rm_status_t rm__sp_start(rm__sp_t *p, const char *policy, int rank, int world,
                         int coded_s, int max_staleness, rm__sp_gate_fn gate,
                         void *ctx);
void rm__sp_free(rm__sp_t *p);

/* Does the coordinator decide members (every policy but none)? */
int rm__sp_gated(const rm__sp_t *p);

/* Spend ms of simulated compute for 0-based `step`, in slices of at most
 * 1 ms. Under a gated policy the gate is asked every 2 ms (not ready)
 * whether `step` was decided without this rank; then the rest is not spent
 * and 1 is returned (members filled). 0: all of it was spent. OUT *left (may
 * be NULL): ms not spent. Under none the time is simply spent. */
int rm__sp_spend(rm__sp_t *p, uint64_t step, double ms, double *left);

/* The member mask of `step` into p->members: every rank under none;
 * otherwise this rank arrives (ready) and waits for the decision (a long
 * poll under backup and coded; polling every 1 ms under deadline, stale and
 * auto, whose deadline is finer than the coordinator's tick). Adds the time
 * to p->wait_ms. RM_ERR_ABORTED when the gate failed (the generation moved
 * on: stop stepping). */
rm_status_t rm__sp_decide(rm__sp_t *p, uint64_t step);

/* After a decided step (not stale): count it in the statistics. */
void rm__sp_count(rm__sp_t *p, int contributed, int contributors);

/* ---- stale (see the protocol in step_engine.c) ---- */
/* 1 when this rank owes no gradient: compute a fresh one for `step` now,
 * then call rm__sp_stale_owe with its simulated extra time. */
int rm__sp_stale_fresh(const rm__sp_t *p);
void rm__sp_stale_owe(rm__sp_t *p, uint64_t step, double extra_ms);
/* Work on the owed gradient during `step`; returns 1 when it is ready to be
 * contributed to `step` (the caller contributes it), 0 when this rank
 * contributes zeros to `step` and keeps working next step. Waits at the
 * gate like rm__sp_decide. RM_ERR_ABORTED (as a negative value -1) when the
 * gate failed. */
int rm__sp_stale_work(rm__sp_t *p, uint64_t step);
/* Collective, every rank of comm: all-reduce the step header (f64: rows
 * contributed, from-step of each contributor) and check the bound on every
 * contributor (RM_ERR_INTERNAL with words in err when one is > k late).
 * contributing: this rank adds its owed gradient of `rows` rows. OUT *rows_total
 * = rows of the step over every contributor. Clears the debt on success. */
rm_status_t rm__sp_stale_header(rm__sp_t *p, rm_comm_t *comm, uint64_t step,
                                int contributing, double rows,
                                double *rows_total, char *err, size_t errlen);
/* From-step of rank r's contribution to the step of the last header, or
 * -1 when r contributed nothing. */
int64_t rm__sp_stale_from(const rm__sp_t *p, int r);

/* `"straggler":{...}` JSON member text of the statistics, for a
 * workload's summary (no leading comma). */
void rm__sp_summary(const rm__sp_t *p, char *buf, size_t len);

#endif
