/*
 * store.h - the coordinator's durable record (module tier): the store
 * interface, the only door to the SQLite file. Callers hold the
 * coordinator lock; every write joins the transaction rm__store_begin
 * opened and is durable at rm__store_commit (WAL), before any answer goes
 * out (core/commit.c). Nothing outside store/ sees a SQLite type.
 *
 * Records are the in-memory ones of model.h; functions that return arrays
 * allocate them as one block (free with rm_coord_free).
 */
#ifndef RM_COORDINATOR_STORE_STORE_H
#define RM_COORDINATOR_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct rm__store rm__store_t; /* store_int.h */

/* Open (create, migrate) the file at path. OUT: *out on success; err says
 * what failed otherwise. */
rm_status_t rm__store_open(const char *path, rm__store_t **out, char *err,
                           size_t errlen);
void rm__store_close(rm__store_t *s);
/* The verifier of a job token as the jobs table stores it (store_key.c):
 * hex SHA-256, RM__VERIFIER_HEX digits. Compare two with rm__ct_streq. */
#define RM__VERIFIER_HEX 64
void rm__store_verifier(const char *token, char out[RM__VERIFIER_HEX + 1]);
/* The data-plane key of (job, generation), derived from the key file's
 * secret (store_datakey.c); the same for every member, never stored. */
#define RM__DATA_KEY_BYTES 32
void rm__store_data_key(const rm__store_t *s, uint64_t job, uint64_t gen,
                        unsigned char out[RM__DATA_KEY_BYTES]);
/* The transaction of one locked section: BEGIN; COMMIT (a failed COMMIT is
 * rolled back and the job counts are recounted; returns -1). */
void rm__store_begin(rm__store_t *s);
/* 0, or the SQLite code of the failure that rolled the section back (a
 * failed write step or COMMIT; store.c WRITE FAILURES). */
int rm__store_commit(rm__store_t *s);
/* The store's state after the last transaction that wrote: RM__STORE_OK,
 * RM__STORE_FULL (SQLITE_FULL) or RM__STORE_ERROR (any other failure),
 * with the words in why ("" when OK). */
enum { RM__STORE_OK = 0, RM__STORE_FULL = 1, RM__STORE_ERROR = 2 };
int rm__store_failing(rm__store_t *s, char *why, size_t len);
uint64_t rm__store_failed_commits(const rm__store_t *s);
/* One write of its own (outside any section's transaction): 0 when it
 * committed (the store is healthy again), else the SQLite code. */
int rm__store_probe(rm__store_t *s);
/* Ids of the jobs the open (or just rolled back) transaction inserted; 0
 * for an insert that failed. Valid until the next rm__store_begin. */
const uint64_t *rm__store_txn_new(const rm__store_t *s, size_t *n);
/* Ids of the jobs whose rows the open (or just rolled back) transaction
 * changed (jobs, workers, generations, barriers, results, checkpoints; not
 * step summaries or events, which memory does not keep as state). */
const uint64_t *rm__store_txn_touched(const rm__store_t *s, size_t *n);

void rm__store_job_insert(rm__store_t *s, rm__job_t *j);
void rm__store_job_update(rm__store_t *s, rm__job_t *j);
/* One job, its token unsealed (store_key.c; "" if it cannot be). */
rm_status_t rm__store_job_get(rm__store_t *s, uint64_t id, rm_job_info_t *out);
/* A page of jobs, newest first; the rows carry the verifier, token "". */
rm_status_t rm__store_job_list(rm__store_t *s, const rm_job_filter_t *f,
                               rm_job_info_t **out, size_t *n, size_t *total);
/* Rows of the jobs table by state (kept in memory, no count(*)). */
void rm__store_job_counts(rm__store_t *s, uint64_t *by_state);
/* Ids of the jobs not terminal, ascending (restart). OUT *ids (free). */
void rm__store_active_jobs(rm__store_t *s, uint64_t **ids, size_t *n);
/* Append j's stored workers to j (restart). */
void rm__store_load_workers(rm__store_t *s, rm__job_t *j);

void rm__store_worker_insert(rm__store_t *s, rm__job_t *j, rm__worker_t *w);
void rm__store_worker_update(rm__store_t *s, rm__job_t *j, rm__worker_t *w);
rm_status_t rm__store_workers(rm__store_t *s, uint64_t job_id,
                              rm_worker_info_t **out, size_t *n);
void rm__store_worker_result(rm__store_t *s, rm__worker_t *w);
void rm__store_job_result(rm__store_t *s, rm__job_t *j);
/* The stored result of job id: heap text (or NULL), its rank. */
rm_status_t rm__store_job_result_get(rm__store_t *s, uint64_t id, char **text,
                                     int *rank);
void rm__store_generation(rm__store_t *s, rm__job_t *j);
void rm__store_barrier(rm__store_t *s, rm__job_t *j, rm__barrier_t *b);
void rm__store_step_summary(rm__store_t *s, rm__job_t *j, rm__worker_t *w);
/* A late step report (rpc.c) as a one-step summary row of its own
 * generation and rank; the rank worker_id had in generation gen (-1: not a
 * member of it). */
void rm__store_step_late(rm__store_t *s, uint64_t job_id, const rm_step_sample_t *sample);
int rm__store_generation_rank(rm__store_t *s, uint64_t job_id, uint64_t gen,
                              uint64_t worker_id);
/* The newest `max` step summaries of a job as samples, oldest first (step =
 * the summary's last step, times its means, bytes per step): the window a
 * restarted coordinator starts with. Returns how many were written. */
size_t rm__store_recent_steps(rm__store_t *s, uint64_t job_id, rm_step_sample_t *out,
                              size_t max);
/* The last checkpoint every member completed (recovery.c). */
void rm__store_checkpoint(rm__store_t *s, rm__job_t *j);
uint64_t rm__store_checkpoint_get(rm__store_t *s, uint64_t job_id);
/* Append an event; returns its seq. Newest seq stored (0 if none). */
uint64_t rm__store_event(rm__store_t *s, const rm_event_t *ev);
uint64_t rm__store_last_seq(rm__store_t *s);
rm_status_t rm__store_events(rm__store_t *s, uint64_t job_id, uint64_t after,
                             uint32_t limit, rm_event_t **out, size_t *n);

#endif
