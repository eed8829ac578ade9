/*
 * model.h - the coordinator's in-memory records (jobs, their workers,
 * barriers and parked calls) and the container helpers every layer uses.
 * Data only: no SQL, no protobuf, no locking; store/ persists these
 * records, core/ changes them, rpc/ reads them to answer calls.
 *
 * Ownership: a job owns its arrays (w, members, ring, barriers), its
 * result texts and its straggler/gate state; a parked call (rm__park_t)
 * belongs to the RPC adapter's call and is only LINKED into its job
 * (parked, a circular list with a sentinel) while it waits.
 */
#ifndef RM_COORDINATOR_MODEL_H
#define RM_COORDINATOR_MODEL_H

#include <stdint.h>

#include "coord_types.h"

typedef struct rm__call rm__call_t; /* the RPC adapter's call (rpc/server.c) */
/* A packed answer the core keeps for the answer side (a job's Join tail, a
 * barrier's or a step's answer): its bytes and layout are the answer side's
 * (rpc/server.c), so a blob carries its own release function as its first
 * member and the core drops one with rm__blob_release, naming no rpc/
 * function. */
typedef struct rm__blob rm__blob_t;
typedef void (*rm__blob_release_fn)(rm__blob_t *b);
static inline void rm__blob_release(rm__blob_t *b)
{
  if (b) (*(rm__blob_release_fn *)(void *)b)(b);
}

enum { RM__PARK_NONE = 0, RM__PARK_JOIN, RM__PARK_BARRIER, RM__PARK_WATCH,
       RM__PARK_GATE, RM__PARK_SESSION };

/* A waiting call. What only one kind uses shares a union (a
 * Session holds three parks, a relay lane's are most of its bytes): a
 * park keeps its kind for its call's life, and fields of another kind's
 * are never read. */
typedef struct rm__park {
  struct rm__park *prev, *next; /* in job->parked (circular, sentinel) */
  struct rm__job *job;          /* the job it is linked into, NULL */
  rm__call_t *call;
  uint64_t job_id;
  uint64_t worker_id;
  int64_t deadline_ns;          /* JOIN: end of the long poll; GATE: of the wait */
  uint8_t kind;
  uint8_t watch_sending;        /* WATCH: a message is in flight */
  uint8_t gate_push;            /* SESSION: decisions are pushed to it
                                   (SessionRequest.gate_push) */
  uint8_t moved_on_push;        /* SESSION: told when its generation is over
                                   (SessionRequest.moved_on_push) */
  uint8_t relayed;              /* SESSION, JOIN: a lane of a Relay stream */
  union {
    struct {                    /* WATCH */
      struct rm__park *wprev, *wnext; /* also in job->watchers */
      uint64_t watch_seq;       /* last seq sent */
    };
    struct {                    /* BARRIER */
      struct rm__barrier *barrier;
      int64_t arrived_ns;       /* for wait-time counters */
    };
    uint64_t gate_step;         /* GATE: step asked about */
    struct {                    /* SESSION: the last decision pushed: */
      uint64_t pushed_gen, pushed_step; /* its generation and step + 1; 0 none */
    };
  };
} rm__park_t;

/* What few workers ever have, out of the record every worker holds
 * made at its first write (rm__worker_cold), freed with the
 * record, read through rm__worker_cold_get (zeros and no result when it
 * was never made). */
typedef struct rm__worker_cold {
  /* recovery.c LINK FAILURES: generation + 1 in which this worker's own
   * data plane failed (it sent ReportFailure), and in which a peer
   * reported a timeout naming it; 0 = never */
  uint64_t dp_failed_gen, blamed_gen;
  char *result;                 /* heap: the JSON object its Leave carried
                                   (result.c), NULL if none */
  int blamed_by;                /* rank of the first peer that named it */
  /* the step summary accumulator's named metrics (job.c metrics_merge):
   * the last value of each reported in the window; made by the first
   * report that carries one */
  uint32_t acc_nm;
  rm_step_metric_t acc_m[RM_METRICS_MAX];
} rm__worker_cold_t;

/* A worker of a job: 248 bytes, one a worker for the job's life (issue
 * 16), so its fields go widest first, its flags are bytes, and what few
 * workers have is in `cold`. */
typedef struct rm__worker {
  uint64_t id;
  uint64_t generation;
  int64_t last_ns;              /* monotonic, last call */
  int64_t last_wall_ms;
  int64_t joined_ms;
  uint64_t step, steps_done;
  /* step summary accumulator, flushed to SQLite every 16 reports */
  uint64_t acc_first, acc_last, acc_bytes;
  double acc_step, acc_max, acc_compute, acc_comm, acc_wait, acc_loss, acc_acc;
  double step_ms, compute_ms, comm_ms, wait_ms; /* its last step's; NAN none */
  uint64_t ckpt_step;           /* newest checkpoint it reported (recovery.c) */
  /* suspect.c: exclusions by the robust aggregation over its
   * last W steps (bit 0 = newest); excl_seen: steps in that window (every
   * job's steps update them) */
  uint64_t excl_mask;
  /* Its Join's strings, in one heap block that `host` starts
   * (rm__worker_strs; 800 bytes of fixed arrays a worker were
   * most of its record), the others at their offsets in it
   * (rm__worker_data_addr, _transports, _devices): never NULL, "" when
   * unset. host <= 127 bytes, data_addr <= 159, transports <= 255 (its
   * offer, common/rm_transports.h), devices <= 255. */
  char *host;
  rm__worker_cold_t *cold;      /* NULL until its first write */
  int rank;                     /* -1 until assigned */
  int prev_rank;                /* rank before a re-formation, -1 */
  int rank_hint, world_hint;
  int launch_index;             /* launcher's index (its log worker-N.log), -1 */
  int joins_parked;             /* its Join calls linked in job->parked
                                   (rm__park_link/unlink keep it) */
  int excl_seen;
  rm_worker_state_t state;
  uint16_t s_data_addr, s_transports, s_devices; /* offsets in host's block */
  uint8_t in_group;             /* joining set or current member */
  uint8_t straggler;
  uint8_t suspect;
  uint8_t acc_count;            /* reports in the accumulator (< 16) */
} rm__worker_t;
_Static_assert(sizeof(rm__worker_t) <= 248, "rm__worker_t grew");

static inline const char *rm__worker_data_addr(const rm__worker_t *w)
{
  return w->host + w->s_data_addr;
}
static inline const char *rm__worker_transports(const rm__worker_t *w)
{
  return w->host + w->s_transports;
}
static inline const char *rm__worker_devices(const rm__worker_t *w)
{
  return w->host + w->s_devices;
}
/* w's rarely set fields: read (never NULL), or made to be written. */
const rm__worker_cold_t *rm__worker_cold_get(const rm__worker_t *w);
rm__worker_cold_t *rm__worker_cold(rm__worker_t *w);

typedef struct rm__barrier {
  struct rm__barrier *next;
  char name[RM_COORD_NAME_MAX];
  uint64_t generation;
  rm_barrier_state_t state;
  int64_t opened_ms, deadline_ms, closed_ms; /* wall */
  int64_t deadline_ns;
  int expected, arrived;
  uint8_t *here;                /* [expected], by rank */
  char reason[160];
  int n_missing;
  rm_barrier_member_t *missing; /* snapshot when closed */
  rm__blob_t *answer;           /* RELEASED: the packed answer, built by the
                                   first waiter answered (rpc/waiters.c) and
                                   shared by all; dropped when the barrier
                                   closes (the queued answers hold their own
                                   references) */
  /* PAYLOADS (core/barrier.c): expected * payload_len bytes, rank r's at
   * r * payload_len; payload_len -1 until the first arrival fixes it.
   * Memory only, wiped and freed when the barrier closes. */
  uint8_t *payloads;
  int payload_len;
} rm__barrier_t;

typedef struct rm__job {
  rm_job_info_t info;
  rm__worker_t *w;              /* every worker of the job, in id order */
  size_t nw, capw;
  int *members;                 /* index into w, by rank, current generation */
  int nmembers;
  rm__park_t parked;            /* sentinel */
  rm__park_t watchers;          /* sentinel of the wnext/wprev list: the
                                   WATCH calls of parked, so an event kicks
                                   its watchers without walking N parked
                                   Joins or Barriers */
  /* JOINING COUNT: n_joining == #{w in w[] : rm__worker_joining(w)}.
   * Kept where worker states change in job.c and rpc.c (on_join); every
   * rm__job_info_refresh() recounts it (its O(N) pass: every state
   * transition, rm__job_resume after a restart, recovery's re-formation
   * via rm__job_set_state), so it is rebuilt from the stored rows when a
   * job is reloaded. rm__job_try_form reads it instead of scanning. */
  int n_joining;
  rm__barrier_t *barriers;      /* newest first */
  rm_step_sample_t *ring;       /* recent step reports */
  size_t ring_cap, ring_head, ring_n; /* allocated, next write, filled */
  size_t ring_max;              /* the window (step_window): the ring grows
                                   by doubling up to it, so a short job
                                   holds a few samples, not 4096 */
  int64_t last_join_ns;
  int64_t reform_deadline_ns;   /* 0 = none */
  /* core/liveness.c: silence counts from listen_from_ns at the earliest
   * (the end of the last time the coordinator could not hear the workers);
   * hush_since_ns: most of the workers silent together since then, 0 none */
  int64_t listen_from_ns;
  int64_t hush_since_ns;
  uint64_t start_step;
  int launch_pending;
  rm__blob_t *join_tail;        /* packed peers + spec of this generation,
                                   shared by every Join answer (rpc.c) */
  uint64_t join_tail_gen;
  /* public.c: each member's "shm 3, tcp 4" by rank, computed once per
   * (generation, members): the pair rule is O(members^2) and the ticker
   * asks for it every tick under the lock; memory only */
  char (*links)[64];
  uint64_t links_gen, links_sum;  /* generation and member-ids hash of it */
  int links_n;
  /* recovery.c / decide.c */
  int reform_target;            /* members wanted by a re-formation; 0 = spec */
  uint64_t ckpt_step;           /* last checkpoint every member completed */
  struct rm_straggler *strag;   /* detector, created on the first report */
  struct rm__gate_state *gate;  /* per-step participant gate, per generation */
  int stored_state;             /* state in the jobs row (store.c counts) */
  uint64_t stored_step;         /* step in the jobs row (public.c persists a
                                   step a reader is shown: never backwards
                                   after a restart) */
  /* suspect.c: the last step whose excluded_ranks were counted */
  uint64_t susp_gen, susp_step;
  /* result.c: the job's result, chosen when it succeeds */
  char *result;                 /* heap JSON object text, NULL = none */
  int result_rank;              /* rank whose result it is, -1 */
  /* command.c: the torchrun rendezvous of the first generation,
   * launch index 0's host and the free port its agent found; memory only
   * ("" / 0 until it attached; a restarted coordinator learns it again) */
  char master_addr[128];
  uint32_t master_port;
  /* spec_use.c: straggler_policy_unused was raised (once a job); memory only */
  int spec_use_warned;
} rm__job_t;

/* Worker `id` of j (binary search: workers are appended in id order), or
 * NULL. */
rm__worker_t *rm__job_worker(rm__job_t *j, uint64_t worker_id);
/* Append a zeroed worker (rank, hints and launch index -1, timings NaN);
 * the caller sets its id. The pointer is valid until the next append. */
rm__worker_t *rm__job_worker_add(rm__job_t *j);
/* Set w's strings (NULL: ""; each cut at 255 bytes), copied into one
 * block; the old one goes. */
void rm__worker_strs(rm__worker_t *w, const char *host, const char *data_addr,
                     const char *transports, const char *devices);
/* Free what a worker record owns (its strings, its result). */
void rm__worker_free(rm__worker_t *w);
/* w waits in the group being formed (counted in j->n_joining). */
static inline int rm__worker_joining(const rm__worker_t *w)
{
  return w->in_group && w->state == RM_WORKER_JOINING;
}
/* w is a member of j's current generation (invariant 1 of core/job.c). */
int rm__worker_member(const rm__job_t *j, const rm__worker_t *w);
/* w counts for liveness: a member, or joining the group being formed. */
int rm__worker_live(const rm__job_t *j, const rm__worker_t *w);
/* Link p at the end of j's parked calls / unlink it (no-op when not
 * linked). p->kind and p->worker_id are set before linking: a WATCH call
 * is also linked into j->watchers, a JOIN counts in its worker's
 * joins_parked. */
void rm__park_link(rm__job_t *j, rm__park_t *p);
void rm__park_unlink(rm__park_t *p);

#endif
