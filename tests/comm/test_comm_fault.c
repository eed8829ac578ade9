/*
 * test_comm_fault - failures in the middle of traffic, real processes.
 *
 *   kill   4 ranks loop ring shifts of 16 MiB; rank 2 gets SIGKILL.
 *          Every survivor must return RM_ERR_PEER_LOST naming rank 2.
 *   stop   same, rank 2 gets SIGSTOP; deadline 1000 ms. Every survivor must
 *          return RM_ERR_TIMEOUT or RM_ERR_PEER_LOST naming rank 2.
 *   abort  2 ranks; rank 0 waits for a message that never comes while a
 *          second thread calls rm_comm_abort(): the wait returns
 *          RM_ERR_ABORTED, later calls too (sticky); rank 1 then learns that
 *          rank 0 is gone (RM_ERR_PEER_LOST naming 0).
 *   waitframes  2 ranks, deadline 400 ms. Rank 0 waits for rank 1, which
 *          sleeps outside the library for 300 ms, so rank 0's WAIT frames
 *          land in rank 1's stream ahead of rank 0's DATA; for several
 *          message sizes (header-only up to 1 MiB) every byte must arrive
 *          intact and both ranks end RM_OK: control frames never leak
 *          into a payload.
 *   leftpeer  3 ranks, deadline 400 ms: rank 0 closes its communicator at
 *          once (BYE) while rank 1 waits 300 ms for rank 2, which sleeps
 *          outside the library; rank 1's WAIT frames to the departed rank 0
 *          must not fail it: ranks 1 and 2 end RM_OK.
 *   deadlock  2 ranks both receive from each other first (mismatched code):
 *          one fails RM_ERR_TIMEOUT naming the other with "deadlock" in the
 *          message (each told the other it waits for it); the other does
 *          the same or learns it from the ABORT, which blames it: then it
 *          fails RM_ERR_TIMEOUT naming nobody ("timed out waiting on this
 *          rank": the peer that spoke is alive, so it is not called lost).
 * With RINGMASTER_SHM_CMA_MIN set (comm_fault_cma_*), kill and stop also
 * require the 16 MiB sends to go by single-copy read where the probe
 * allows it.
 * No timing is asserted: the launcher's deadline (tests/lib) only catches hangs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>

#include "rm_testlib.h"

#include "comm/comm_int.h"
#include "transport/shm/shm_int.h"
#include "transport/transport.h"

#define VICTIM 2

/* The communicator of `rank` with a wait deadline of timeout_ms (0 = the
 * default), or NULL with res->status set. */
static rm_comm_t *open_rank(rm_test_world_t *h, int rank, int timeout_ms)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_test_config(h, rank, &cfg);
  if (timeout_ms > 0) cfg.timeout_ms = timeout_ms;
  h->res[rank].status = rm_comm_init(&cfg, &c);
  return h->res[rank].status == RM_OK ? c : NULL;
}

/* 1 when RINGMASTER_SHM_CMA_MIN asks for single-copy reads (comm_fault_cma_*)
 * and this rank's sends to the shared-memory peer `peer` were allowed them
 * (its probe) but none went that way: the test would not test CMA. */
static int cma_wanted_unused(rm_comm_t *c, int peer)
{
  const char *e = getenv("RINGMASTER_SHM_CMA_MIN");
  struct rm__shm_state *s = rm__shm(c);
  if (!e || atol(e) <= 0 || !s || !s->conns[peer].active) return 0;
  if (!__atomic_load_n(&s->conns[peer].out->cma_ok, __ATOMIC_ACQUIRE)) {
    fprintf(stderr, "note: rank %d: single-copy reads not allowed here (probe)\n", rm_comm_rank(c));
    return 0;
  }
  return s->conns[peer].cma_sent == 0;
}

static int ring_loop(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_test_result_t *res = &h->res[rank];
  size_t n = 16u << 20;
  unsigned char *sb = malloc(n), *rb = malloc(n);
  int right = (rank + 1) % h->world, left = (rank + h->world - 1) % h->world;
  rm_status_t st;

  rm_test_config(h, rank, &cfg);
  cfg.timeout_ms = *(int *)arg;
  memset(sb, rank, n);
  st = rm_comm_init(&cfg, &c);
  res->status = st;
  if (st != RM_OK) return 0;
  res->value = 1; /* "connected": the parent waits for this before the fault */
  for (long it = 0; it < 1000000 && st == RM_OK; it++) {
    st = rm__coll_begin(c);
    if (st == RM_OK) st = rm__sendrecv(c, right, sb, n, 0, left, rb, n, 0);
    if (it == 0 && st == RM_OK && cma_wanted_unused(c, right)) {
      fprintf(stderr, "FAIL: rank %d: RINGMASTER_SHM_CMA_MIN is set, no send went by CMA\n", rank);
      res->bad++;
    }
  }
  /* sticky: the next call fails the same way */
  if (rm__coll_begin(c) != st) res->bad++;
  rm_test_finish(res, c, st);
  free(sb);
  free(rb);
  return 0;
}

static int run_ring_fault(int sig, int timeout_ms)
{
  rm_test_world_t h;
  int bad = 0;
  if (rm_test_world_open(&h, 4) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, ring_loop, &timeout_ms);
  double until = rm_test_now_ms() + 30000;
  for (int r = 0; r < 4; r++)
    while (h.res[r].value == 0 && rm_test_now_ms() < until) usleep(1000);
  usleep(300 * 1000); /* let large transfers be in flight */
  kill(h.pid[VICTIM], sig);
  if (sig == SIGSTOP) {
    /* survivors must give up on their own; then clean the victim up */
    double end = rm_test_now_ms() + 60000;
    for (int r = 0; r < 4; r++)
      while (r != VICTIM && !h.res[r].done && rm_test_now_ms() < end) usleep(2000);
    kill(h.pid[VICTIM], SIGKILL);
  }
  bad += rm_test_wait(&h, 60000, VICTIM);
  for (int r = 0; r < 4; r++) {
    rm_test_result_t *res = &h.res[r];
    int ok_status = sig == SIGKILL ? res->status == RM_ERR_PEER_LOST
                                   : (res->status == RM_ERR_TIMEOUT ||
                                      res->status == RM_ERR_PEER_LOST);
    if (r == VICTIM) continue;
    printf("rank %d: %s, blames rank %d: %s\n", r, rm_status_name(res->status),
           res->failed_peer, res->msg);
    if (!res->done || !ok_status || res->failed_peer != VICTIM || res->bad) {
      fprintf(stderr, "FAIL: rank %d done=%d status=%s peer=%d sticky-bad=%d\n",
              r, res->done, rm_status_name(res->status), res->failed_peer,
              res->bad);
      bad++;
    }
  }
  bad += rm_test_shm_leftovers(&h);
  rm_test_world_close(&h);
  return bad;
}

static const size_t g_sizes[] = {0, 8, 40, 48, 100, 4096, 1u << 20};
#define NSIZES (sizeof g_sizes / sizeof g_sizes[0])

static unsigned char pattern(size_t i, size_t round)
{
  return (unsigned char)(i * 131u + round * 7u + 1u);
}

static int waitframes_rank(rm_test_world_t *h, int rank, void *arg)
{
  rm_test_result_t *res = &h->res[rank];
  rm_comm_t *c = open_rank(h, rank, 400);
  unsigned char *buf = malloc(1u << 20);
  rm_status_t st = RM_OK;

  if (c == NULL) {
    free(buf);
    return 0;
  }
  for (size_t k = 0; k < NSIZES && st == RM_OK; k++) {
    size_t n = g_sizes[k];
    uint64_t token = k;
    st = rm__coll_begin(c);
    if (rank == 0) {
      /* block on rank 1 (WAIT frames go out), then send it n bytes */
      if (st == RM_OK) st = rm__sendrecv(c, -1, NULL, 0, 0, 1, &token, sizeof token, 1);
      for (size_t i = 0; i < n; i++) buf[i] = pattern(i, k);
      if (st == RM_OK) st = rm__sendrecv(c, 1, buf, n, 2, -1, NULL, 0, 0);
    } else {
      usleep(300 * 1000); /* outside the library: rank 0's WAITs queue up */
      if (st == RM_OK) st = rm__sendrecv(c, 0, &token, sizeof token, 1, -1, NULL, 0, 0);
      memset(buf, 0xEE, n);
      /* let rank 0's DATA queue up behind its WAITs before we read: one
       * read then takes WAIT + (WAIT +) DATA header + payload bytes */
      usleep(50 * 1000);
      if (st == RM_OK) st = rm__sendrecv(c, -1, NULL, 0, 0, 0, buf, n, 2);
      for (size_t i = 0; st == RM_OK && i < n; i++)
        if (buf[i] != pattern(i, k)) {
          res->bad++;
          break;
        }
    }
  }
  rm_test_finish(res, c, st);
  free(buf);
  return 0;
}

static int leftpeer_rank(rm_test_world_t *h, int rank, void *arg)
{
  rm_test_result_t *res = &h->res[rank];
  rm_comm_t *c = open_rank(h, rank, 400);
  uint64_t v = 7;
  rm_status_t st;

  if (c == NULL) return 0;
  st = rm__coll_begin(c);
  if (rank == 1 && st == RM_OK) {
    st = rm__sendrecv(c, -1, NULL, 0, 0, 2, &v, sizeof v, 0);
    if (st == RM_OK && v != 42) res->bad++;
  } else if (rank == 2 && st == RM_OK) {
    usleep(300 * 1000);
    v = 42;
    st = rm__sendrecv(c, 1, &v, sizeof v, 0, -1, NULL, 0, 0);
  }
  rm_test_finish(res, c, st);
  return 0;
}

static int deadlock_rank(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_t *c = open_rank(h, rank, 400);
  uint64_t v = 0;
  rm_status_t st;

  if (c == NULL) return 0;
  st = rm__coll_begin(c);
  if (st == RM_OK) st = rm__sendrecv(c, -1, NULL, 0, 0, 1 - rank, &v, sizeof v, 0);
  rm_test_finish(&h->res[rank], c, st);
  return 0;
}

/* Run fn on `world` ranks; every rank must end with status `want` and no
 * bad element. */
static int run_all_end(int world, rm_test_rank_fn fn, rm_status_t want)
{
  rm_test_world_t h;
  int bad;
  if (rm_test_world_open(&h, world) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, fn, NULL);
  bad = rm_test_wait(&h, 60000, -1);
  for (int r = 0; r < world; r++) {
    rm_test_result_t *res = &h.res[r];
    printf("rank %d: %s peer %d bad %d: %s\n", r, rm_status_name(res->status),
           res->failed_peer, res->bad, res->msg);
    if (!res->done || res->status != (int)want || res->bad) {
      fprintf(stderr, "FAIL: rank %d\n", r);
      bad++;
    }
  }
  bad += rm_test_shm_leftovers(&h);
  rm_test_world_close(&h);
  return bad;
}

/* Whichever rank's verdict comes first fails RM_ERR_TIMEOUT "deadlock"
 * naming the other; the other may fail the same way or learn of it from
 * the ABORT frame that blames it (RM_ERR_TIMEOUT naming nobody). */
static int run_deadlock(void)
{
  rm_test_world_t h;
  int bad, saw_deadlock = 0;
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, deadlock_rank, NULL);
  bad = rm_test_wait(&h, 60000, -1);
  for (int r = 0; r < 2; r++) {
    rm_test_result_t *res = &h.res[r];
    printf("rank %d: %s peer %d: %s\n", r, rm_status_name(res->status),
           res->failed_peer, res->msg);
    int told = res->status == RM_ERR_TIMEOUT && res->failed_peer == -1 &&
               strstr(res->msg, "timed out waiting on this rank");
    if (res->status == RM_ERR_TIMEOUT && strstr(res->msg, "deadlock"))
      saw_deadlock++;
    else if (!told)
      bad++;
    if (!res->done || (!told && res->failed_peer != 1 - r)) bad++;
  }
  if (saw_deadlock == 0) bad++;
  bad += rm_test_shm_leftovers(&h);
  rm_test_world_close(&h);
  return bad;
}

static void *abort_later(void *arg)
{
  usleep(200 * 1000);
  rm_comm_abort(arg);
  return NULL;
}

static int abort_rank(rm_test_world_t *h, int rank, void *arg)
{
  rm_test_result_t *res = &h->res[rank];
  rm_comm_t *c = open_rank(h, rank, 0);
  uint64_t v = 0;
  rm__req_t rq;
  pthread_t th;
  rm_status_t st;

  if (c == NULL) return 0;
  if (rank == 0) {
    rm__coll_begin(c);
    pthread_create(&th, NULL, abort_later, c);
    st = rm__irecv(c, 1, &v, sizeof v, 0, &rq);
    if (st == RM_OK) st = rm__wait(c, &rq);
    pthread_join(th, NULL);
    if (rm__coll_begin(c) != RM_ERR_ABORTED) res->bad++;
    if (rm_comm_status(c) != RM_ERR_ABORTED) res->bad++;
    if (rm_comm_last_error(c)[0] == '\0') res->bad++;
  } else {
    /* waits for rank 0's message, which never comes: rank 0's abort must
     * reach us as a lost peer (well before the 10 s deadline) */
    rm__coll_begin(c);
    st = rm__irecv(c, 0, &v, sizeof v, 0, &rq);
    if (st == RM_OK) st = rm__wait(c, &rq);
  }
  rm_test_finish(res, c, st);
  return 0;
}

static int run_abort(void)
{
  rm_test_world_t h;
  int bad;
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, abort_rank, NULL);
  bad = rm_test_wait(&h, 60000, -1);
  for (int r = 0; r < 2; r++)
    printf("rank %d: %s peer %d: %s\n", r, rm_status_name(h.res[r].status),
           h.res[r].failed_peer, h.res[r].msg);
  if (h.res[0].status != RM_ERR_ABORTED || h.res[0].bad) bad++;
  if (h.res[1].status != RM_ERR_PEER_LOST || h.res[1].failed_peer != 0) bad++;
  bad += rm_test_shm_leftovers(&h);
  rm_test_world_close(&h);
  return bad;
}

int main(int argc, char **argv)
{
  int bad;
  const char *mode = argc > 1 ? argv[1] : "kill";
  if (strcmp(mode, "kill") == 0)
    bad = run_ring_fault(SIGKILL, 10000);
  else if (strcmp(mode, "stop") == 0)
    bad = run_ring_fault(SIGSTOP, 1000);
  else if (strcmp(mode, "abort") == 0)
    bad = run_abort();
  else if (strcmp(mode, "waitframes") == 0)
    bad = run_all_end(2, waitframes_rank, RM_OK);
  else if (strcmp(mode, "leftpeer") == 0)
    bad = run_all_end(3, leftpeer_rank, RM_OK);
  else if (strcmp(mode, "deadlock") == 0)
    bad = run_deadlock();
  else
    RM_TEST_FAIL("unknown mode %s", mode);
  printf("%s: %s\n", mode, bad ? "FAIL" : "ok");
  return bad ? 1 : 0;
}
