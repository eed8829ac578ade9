/*
 * test_tagged.c - tagged point-to-point (rm_isend / rm_irecv on a
 * communicator made by rm_comm_dup), one real process per rank:
 *
 *   test_tagged WORLD
 *
 * 1. rm_comm_dup over the harness's communicator; the parent's collectives
 *    keep working beside the point-to-point traffic (checked at the end).
 * 2. Every ordered pair: the sender posts tag 7 (300,000 bytes), tag 5
 *    (1,000), tag 7 (0), tag 7 (17); the receiver posts tag 5 first, then
 *    the three tag-7 receives: tag 5 overtakes (matched out of order from
 *    the unexpected messages), the tag-7 messages keep their order. Every
 *    byte names (sender, receiver, message, index).
 * 3. Rank 0 receives one message from each other rank with RM_ANY_SOURCE;
 *    the sources it reports are every other rank once.
 * 4. A receive from rank 1 that nothing sends, 300 ms: RM_ERR_TIMEOUT, and
 *    the communicator stays usable (step 5 runs on it).
 * 5. Rank 1 sends 10 bytes where rank 0 receives 8: RM_ERR_INVALID_ARG with
 *    both sizes in the words; the next exchange works.
 * 6. Argument errors (RM_ERR_INVALID_ARG, nothing posted), and a collective
 *    on the point-to-point communicator is refused.
 * 7. rm_p2p_wait(timeout 0) on an open receive says not done.
 * 8. (RM_TEST_LOST=1) Rank 1 exits without a word once rank 0 waits for
 *    it: rank 0's receive ends with RM_ERR_PEER_LOST naming rank 1, well
 *    before its 30 s deadline (no hang). The other ranks close their
 *    communicators meanwhile; their GOODBYE keeps the header receives
 *    rank 0 still has posted to them (from step 3's any-source receives)
 *    from failing it first.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rm_testlib.h"
#include "ringmaster/ringmaster.h"

static const size_t g_len[4] = {300000, 1000, 0, 17};
static const uint64_t g_tag[4] = {7, 5, 7, 7};

static unsigned char pat(int s, int d, int m, size_t i)
{
  return (unsigned char)(s * 31 + d * 7 + m * 59 + (int)(i % 251));
}

static int bad_st(int r, const char *what, rm_status_t st, rm_comm_t *c, rm_p2p_req_t *q)
{
  if (st == RM_OK) return 0;
  fprintf(stderr, "rank %d: %s -> %s (%s%s)\n", r, what, rm_status_name(st),
          q ? rm_p2p_error(q) : "", c ? rm_comm_last_error(c) : "");
  return 1;
}

static rm_status_t wait_free(rm_comm_t *p, rm_p2p_req_t *q, int *source)
{
  int done = 0;
  rm_status_t st = rm_p2p_wait(p, q, -1, &done);
  if (st != RM_OK) fprintf(stderr, "  %s\n", rm_p2p_error(q));
  if (source) *source = rm_p2p_source(q);
  rm_p2p_free(p, q);
  return st;
}

static int t_pairs(rm_comm_t *p)
{
  int r = rm_comm_rank(p), n = rm_comm_world(p), bad = 0;
  unsigned char *out[64][4], *in[64][4];
  rm_p2p_req_t *sq[64][4], *rq[64][4];
  static const int order[4] = {1, 0, 2, 3}; /* receive tag 5 first */
  for (int j = 0; j < n; j++) {
    if (j == r) continue;
    for (int m = 0; m < 4; m++) {
      out[j][m] = malloc(g_len[m] + 1);
      for (size_t i = 0; i < g_len[m]; i++) out[j][m][i] = pat(r, j, m, i);
      bad += bad_st(r, "isend", rm_isend(p, out[j][m], g_len[m], j, g_tag[m], 0, &sq[j][m]),
                    p, NULL);
    }
  }
  for (int j = 0; j < n; j++) {
    if (j == r) continue;
    for (int k = 0; k < 4; k++) {
      int m = order[k];
      in[j][m] = malloc(g_len[m] + 1);
      memset(in[j][m], 0xEE, g_len[m] + 1);
      bad += bad_st(r, "irecv", rm_irecv(p, in[j][m], g_len[m], j, g_tag[m], 0, &rq[j][m]),
                    p, NULL);
    }
  }
  for (int j = 0; j < n; j++) {
    if (j == r) continue;
    for (int m = 0; m < 4; m++) {
      int src = -2;
      bad += bad_st(r, "wait send", wait_free(p, sq[j][m], NULL), p, NULL);
      bad += bad_st(r, "wait recv", wait_free(p, rq[j][m], &src), p, NULL);
      if (src != j) {
        fprintf(stderr, "rank %d: message %d from %d: source says %d\n", r, m, j, src);
        bad++;
      }
      for (size_t i = 0; i < g_len[m]; i++)
        if (in[j][m][i] != pat(j, r, m, i)) {
          fprintf(stderr, "rank %d: message %d (tag %llu) from rank %d: byte %zu is %u, "
                  "want %u\n", r, m, (unsigned long long)g_tag[m], j, i, in[j][m][i],
                  pat(j, r, m, i));
          bad++;
          break;
        }
      if (in[j][m][g_len[m]] != 0xEE) {
        fprintf(stderr, "rank %d: message %d from %d wrote past its end\n", r, m, j);
        bad++;
      }
      free(out[j][m]);
      free(in[j][m]);
    }
  }
  return bad;
}

static int t_any(rm_comm_t *p)
{
  int r = rm_comm_rank(p), n = rm_comm_world(p), bad = 0, seen[64] = {0};
  int32_t v = r * 100;
  if (r != 0) return bad_st(r, "send to 0", rm_send(p, &v, sizeof v, 0, 9), p, NULL);
  for (int k = 1; k < n; k++) {
    int src = -1;
    int32_t got = -1;
    bad += bad_st(r, "recv any", rm_recv(p, &got, sizeof got, RM_ANY_SOURCE, 9, &src), p, NULL);
    if (src < 1 || src >= n || seen[src]++ || got != src * 100) {
      fprintf(stderr, "rank 0: any-source receive %d: source %d value %d\n", k, src, got);
      bad++;
    }
  }
  return bad;
}

/* 4 and 5: a receive's own timeout; a size mismatch. */
static int t_errors(rm_comm_t *p)
{
  int r = rm_comm_rank(p), bad = 0;
  char b[16] = {0};
  if (r == 0) {
    rm_p2p_req_t *q;
    int done = 1;
    bad += bad_st(r, "irecv", rm_irecv(p, b, 4, 1, 1234, 300, &q), p, NULL);
    rm_status_t st = rm_p2p_wait(p, q, 0, &done);
    if (st != RM_OK || done) {
      fprintf(stderr, "rank 0: wait(0) on an open receive: %s done %d\n", rm_status_name(st),
              done);
      bad++;
    }
    st = rm_p2p_wait(p, q, -1, &done);
    if (st != RM_ERR_TIMEOUT || !strstr(rm_p2p_error(q), "rank 1")) {
      fprintf(stderr, "rank 0: unmatched receive: %s (%s), want RM_ERR_TIMEOUT naming "
              "rank 1\n", rm_status_name(st), rm_p2p_error(q));
      bad++;
    }
    rm_p2p_free(p, q);
    bad += bad_st(r, "after the timeout", rm_comm_status(p), p, NULL);
    bad += bad_st(r, "ready", rm_send(p, b, 1, 1, 1), p, NULL);
    st = rm_irecv(p, b, 8, 1, 11, 0, &q);
    if (st == RM_OK) st = rm_p2p_wait(p, q, -1, &done);
    if (st != RM_ERR_INVALID_ARG || !strstr(rm_p2p_error(q), "10 bytes")) {
      fprintf(stderr, "rank 0: 10 bytes into 8: %s (%s)\n", rm_status_name(st),
              rm_p2p_error(q));
      bad++;
    }
    rm_p2p_free(p, q);
    bad += bad_st(r, "after the mismatch", rm_recv(p, b, 3, 1, 12, NULL), p, NULL);
  } else if (r == 1) {
    bad += bad_st(r, "ready", rm_recv(p, b, 1, 0, 1, NULL), p, NULL);
    bad += bad_st(r, "send 10", rm_send(p, b, 10, 0, 11), p, NULL);
    bad += bad_st(r, "send 3", rm_send(p, b, 3, 0, 12), p, NULL);
  }
  return bad;
}

static int t_args(rm_comm_t *p)
{
  int r = rm_comm_rank(p), n = rm_comm_world(p), bad = 0;
  rm_p2p_req_t *q = (rm_p2p_req_t *)&bad;
  char b[4];
  struct { rm_status_t got; const char *what; } t[] = {
      {rm_isend(p, b, 4, r, 1, 0, &q), "send to self"},
      {rm_isend(p, b, 4, n, 1, 0, &q), "send to rank world"},
      {rm_isend(p, b, 4, RM_ANY_SOURCE, 1, 0, &q), "send to any"},
      {rm_irecv(p, b, 4, -2, 1, 0, &q), "receive from -2"},
      {rm_irecv(p, NULL, 4, (r + 1) % n, 1, 0, &q), "NULL buffer"},
      {rm_irecv(p, b, 4, (r + 1) % n, 1, -5, &q), "negative timeout"},
      {rm_irecv(NULL, b, 4, 0, 1, 0, &q), "NULL communicator"},
      {rm_allreduce(p, b, b, 1, RM_I32, RM_SUM), "collective on it"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (t[i].got != RM_ERR_INVALID_ARG) {
      fprintf(stderr, "rank %d: %s: %s, want RM_ERR_INVALID_ARG\n", r, t[i].what,
              rm_status_name(t[i].got));
      bad++;
    }
  if (q != NULL) {
    fprintf(stderr, "rank %d: a refused call left a request\n", r);
    bad++;
  }
  return bad;
}

/* 8: rank 1 leaves without a word while rank 0 waits for it. */
static int t_lost(rm_comm_t *p)
{
  int r = rm_comm_rank(p), done = 0;
  char b[4] = {0};
  rm_p2p_req_t *q;
  if (r == 1) { /* leaves once rank 0 waits for it */
    if (rm_recv(p, b, 1, 0, 98, NULL) != RM_OK) return 1;
    _exit(0);
  }
  if (r != 0) return 0;
  struct timespec t0, t1;
  if (bad_st(r, "irecv", rm_irecv(p, b, 4, 1, 99, 0, &q), p, NULL) ||
      bad_st(r, "go", rm_send(p, b, 1, 1, 98), p, NULL))
    return 1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  rm_status_t st = rm_p2p_wait(p, q, -1, &done);
  rm_p2p_free(p, q);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  if (st != RM_ERR_PEER_LOST || rm_comm_failed_peer(p) != 1 || s > 20) {
    fprintf(stderr, "rank 0: rank 1 gone: %s after %.1f s, peer %d (%s); want "
            "RM_ERR_PEER_LOST naming rank 1\n", rm_status_name(st), s,
            rm_comm_failed_peer(p), rm_comm_last_error(p));
    return 1;
  }
  printf("rank 0: rank 1 gone: %s after %.2f s: %s\n", rm_status_name(st), s,
         rm_comm_last_error(p));
  return 0;
}

static int suite(rm_comm_t *c, void *arg)
{
  int r = rm_comm_rank(c), n = rm_comm_world(c), bad = 0;
  rm_comm_t *p = NULL;
  (void)arg;
  rm_comm_set_timeout(c, 30000);
  if (bad_st(r, "rm_comm_dup", rm_comm_dup(c, &p), c, NULL)) return 1;
  if (n > 1 && strcmp(rm_comm_transport(p, (r + 1) % n), rm_comm_transport(c, (r + 1) % n))) {
    fprintf(stderr, "rank %d: the duplicate's transport differs\n", r);
    bad++;
  }
  if (n > 1) {
    bad += t_pairs(p);
    bad += t_any(p);
    bad += t_errors(p);
    bad += t_args(p);
  }
  int32_t x = 1; /* the parent's collectives still work */
  bad += bad_st(r, "allreduce on the parent", rm_allreduce(c, &x, &x, 1, RM_I32, RM_SUM), c,
                NULL);
  if (x != n) {
    fprintf(stderr, "rank %d: allreduce gave %d\n", r, x);
    bad++;
  }
  if (!bad && n > 1 && getenv("RM_TEST_LOST")) bad += t_lost(p);
  rm_comm_destroy(p);
  if (r == 0) printf("world %d: tagged point-to-point %s\n", n, bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
  int world = argc > 1 ? atoi(argv[1]) : 0;
  if (world < 1 || world > 64) {
    fprintf(stderr, "usage: test_tagged WORLD (1-64)\n");
    return 2;
  }
  return rm_test_run(world, suite, NULL, 120000) ? 1 : 0;
}
