/* bench_fork.h - run one benchmark function per rank, `world` processes
 * forked on 127.0.0.1 (rm_bench, rm_bench_agg). */
#ifndef RM_BENCH_FORK_H
#define RM_BENCH_FORK_H

#include "ringmaster/ringmaster.h"

#define RM_BENCH_MAX_WORLD 64

/* The rank's work: peers[0..world-1] are the ranks' addresses, ep the
 * endpoint already listening on peers[rank]; returns the exit code. */
typedef int (*rm_bench_rank_fn)(int rank, int world, const char **peers,
                                rm_endpoint_t *ep, const void *arg);

/* Open one endpoint per rank, fork the ranks, wait for all (one that fails
 * gets the others SIGTERMed: they would wait for it). 0 when every rank
 * exited 0. */
int rm_bench_run_forked(int world, rm_bench_rank_fn fn, const void *arg);

/* The rank's communicator over ep (job 1, generation 1; connect deadline
 * 60 s, data deadline at least timeout_ms when > 0); prints why it failed. */
rm_status_t rm_bench_comm(int rank, int world, const char **peers, rm_endpoint_t *ep,
                          int timeout_ms, rm_comm_t **out);

/* One rank started on its own (another host, a network namespace): listen
 * on bind_ip:0, publish "address\noffer\n" as DIR/RANK, wait up to 60 s for
 * every rank's file, fill peers (static storage) and remember the offers
 * for rm_bench_comm. *ep is the endpoint to pass on. 0 or -1 (printed). */
int rm_bench_rendezvous(const char *dir, int rank, int world, const char *bind_ip,
                        rm_endpoint_t **ep, const char **peers);

/* CLOCK_MONOTONIC in microseconds, and a qsort comparator of doubles (the
 * medians every bench table prints). */
double rm_bench_now_us(void);
int rm_bench_cmp_double(const void *a, const void *b);

#endif
