/*
 * rm_testlib.h - run one real process per rank on 127.0.0.1 (the one
 * multi-process launcher of the test suites: collectives, comm, aggregate,
 * train, hw).
 *
 * How a world runs:
 *   1. the parent opens `world` endpoints on 127.0.0.1:0 before forking, so
 *      every port is free and known and nobody else can take it;
 *   2. it forks one child per rank; child r closes the other ranks'
 *      endpoints and keeps its own (the inherited listening socket);
 *   3. the child runs the test function; its return value is the child's
 *      exit status (exit(), not _exit(): LeakSanitizer runs in every rank);
 *   4. the parent reaps with a deadline: ranks still running when it passes
 *      are SIGKILLed by PID and counted as failed. Each rank's wait status
 *      is kept (rm_test_world_t.status, .killed).
 *
 * Two levels:
 *   rm_test_run(world, fn, arg, timeout_ms)
 *       each child builds its communicator on its endpoint (rm_test_config)
 *       and runs fn(comm, arg); returns the number of failed ranks.
 *   rm_test_world_open / rm_test_start / rm_test_wait / rm_test_world_close
 *       for fault tests: the child gets the world (endpoint, addresses,
 *       shared result slots) and builds a communicator itself, or not at
 *       all; the parent may act between start and wait (SIGKILL a rank, talk
 *       to a rank's port as a fake peer, read progress from the results).
 */
#ifndef RM_TESTS_LIB_RM_TESTLIB_H
#define RM_TESTS_LIB_RM_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "ringmaster/ringmaster.h"

#define RM_TEST_MAX_WORLD 64

/* One per rank, in MAP_SHARED memory: what a child reports to the parent. */
typedef struct rm_test_result {
  int done;        /* 1 once the rank's function returned */
  int status;      /* rm_status_t the rank ended with */
  int failed_peer;
  int bad;         /* number of wrong elements / failed checks */
  double value;    /* free measurement (MB/s, progress counter, ...) */
  char msg[256];
} rm_test_result_t;

typedef struct rm_test_world {
  int world;
  rm_endpoint_t *ep[RM_TEST_MAX_WORLD];
  char addr[RM_TEST_MAX_WORLD][128];
  const char *peers[RM_TEST_MAX_WORLD]; /* -> addr, for rm_comm_config_t */
  /* what each endpoint offers (rm_endpoint_transports): ranks of one world
   * share the host, so pairs use shared memory unless RINGMASTER_TRANSPORTS
   * says otherwise (e.g. "tcp" for the TCP fault tests) */
  char offer[RM_TEST_MAX_WORLD][256];
  const char *offers[RM_TEST_MAX_WORLD];
  pid_t pid[RM_TEST_MAX_WORLD];
  int status[RM_TEST_MAX_WORLD]; /* waitpid status once reaped */
  int killed[RM_TEST_MAX_WORLD]; /* 1: SIGKILLed at the deadline */
  rm_test_result_t *res;         /* shared with the children */
} rm_test_world_t;

/* Child body of the low level: returns the rank's exit status. */
typedef int (*rm_test_rank_fn)(rm_test_world_t *w, int rank, void *arg);
/* Child body of rm_test_run: returns the rank's exit status. */
typedef int (*rm_test_fn)(rm_comm_t *c, void *arg);

typedef struct rm_test_opts {
  int timeout_ms;         /* the parent's deadline for every rank; 0 = 120000 */
  int comm_timeout_ms;    /* communicator wait deadline; 0 = RINGMASTER_TIMEOUT_MS
                             (rm_comm_config_init) capped at 60000 */
  int connect_timeout_ms; /* 0 = rm_comm_config_init's */
} rm_test_opts_t;

/* ---- high level ---- */
/* Failed ranks (exit status != 0, killed, or could not start): 0 = pass. */
int rm_test_run(int world, rm_test_fn fn, void *arg, int timeout_ms);
int rm_test_run_opts(int world, rm_test_fn fn, void *arg, const rm_test_opts_t *o);

/* ---- low level ---- */
/* Endpoints on 127.0.0.1:0 and zeroed shared results. 0, or -1 (closed). */
int rm_test_world_open(rm_test_world_t *w, int world);
void rm_test_world_close(rm_test_world_t *w);
/* Communicator config for `rank` on the world's endpoints and their
 * transport offers: job 42, generation 1, timeout and connect timeout
 * 10000 ms; with RM_TEST_DATA_KEY=1 a data-plane key shared by all ranks. */
void rm_test_config(const rm_test_world_t *w, int rank, rm_comm_config_t *cfg);
/* Fork every rank; child r runs fn(w, r, arg), sets res[r].done and exits
 * with fn's value. 0, or -1 when a fork failed (the ranks already started
 * are killed and reaped). */
int rm_test_start(rm_test_world_t *w, rm_test_rank_fn fn, void *arg);
/* Reap every rank within timeout_ms, SIGKILL stragglers by PID. Returns the
 * number of ranks that did not exit 0; rank `expect_killed` (the victim of a
 * fault test, -1 for none) is not counted whatever its end. */
int rm_test_wait(rm_test_world_t *w, int timeout_ms, int expect_killed);
/* The same for a world of 2 whose rank 1 the test plays itself (a fake or
 * hostile peer): only rank 0 is forked, and only rank 0 is reaped. */
int rm_test_start_rank0(rm_test_world_t *w, rm_test_rank_fn fn, void *arg);
int rm_test_wait_rank0(rm_test_world_t *w, int timeout_ms);
/* A TCP connection to addr's port on 127.0.0.1 (the world's endpoints are
 * loopback), reads timing out after rcv_timeout_s seconds (0: never), or
 * fail the test. */
int rm_test_dial(const char *addr, int rcv_timeout_s);
/* Write all n bytes of p to fd, or fail the test. */
void rm_test_put(int fd, const void *p, size_t n);

/* ---- helpers ---- */
/* Record how a rank's communicator ended in res (status st, the peer it
 * blames, its last error message), then destroy c. */
void rm_test_finish(rm_test_result_t *res, rm_comm_t *c, rm_status_t st);

/* Segments in /dev/shm named by this world's endpoints (shm inboxes) that
 * still exist; each is printed. 0 once every rank's communicator is gone
 * (also after a SIGKILL: inboxes are unlinked once all peers mapped them). */
int rm_test_shm_leftovers(const rm_test_world_t *w);
/* How many /dev/shm entries start with prefix. */
int rm_test_shm_count(const char *prefix);
/* The simulated host of rank r under RINGMASTER_TEST_HOSTS=K (0 without). */
int rm_test_host_of(const rm_test_world_t *w, int r);

double rm_test_now_ms(void);  /* CLOCK_MONOTONIC */
int rm_test_open_fds(void);   /* entries in /proc/self/fd (-1 if unreadable) */

#define RM_TEST_FAIL(...)                                                     \
  do {                                                                        \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                      \
    fprintf(stderr, __VA_ARGS__);                                             \
    fprintf(stderr, "\n");                                                    \
    exit(1);                                                                  \
  } while (0)

#endif
