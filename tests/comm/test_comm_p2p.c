/*
 * test_comm_p2p - communicator create + point-to-point traffic over TCP, one
 * process per rank, for the world sizes given on the command line.
 *
 * Per rank: all-pairs exchange at sizes {0, 1, 7, 1000, 2^20+3} bytes (every
 * byte checked), 16 messages in flight per pair (FIFO matching by tag), a
 * ring shift of a large buffer (checked; MB/s printed, not asserted), and
 * the sticky-status accessors of a healthy communicator and its deadline
 * setter (rm_comm_set_timeout).
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

#include "rm_testlib.h"

#include "comm/comm_int.h"
#include "transport/transport.h"

static unsigned char pat(int src, int dst, uint64_t seq, size_t i)
{
  return (unsigned char)(src * 31 + dst * 7 + (int)seq * 3 + (int)(i * 13));
}

static int all_pairs(rm_comm_t *c, size_t n)
{
  int w = c->world, me = c->rank, bad = 0;
  unsigned char **sb = calloc((size_t)w, sizeof *sb);
  unsigned char **rb = calloc((size_t)w, sizeof *rb);
  rm__req_t *rq = calloc((size_t)(2 * w), sizeof *rq);
  rm__req_t **rp = calloc((size_t)(2 * w), sizeof *rp);
  if (rm__coll_begin(c) != RM_OK) return 1;
  for (int p = 0; p < w; p++) {
    if (p == me) continue;
    sb[p] = malloc(n + 1);
    rb[p] = malloc(n + 1);
    for (size_t i = 0; i < n; i++) sb[p][i] = pat(me, p, c->coll_seq, i);
    if (rm__irecv(c, p, rb[p], n, n, &rq[2 * p]) != RM_OK) bad++;
    if (rm__isend(c, p, sb[p], n, n, &rq[2 * p + 1]) != RM_OK) bad++;
    rp[2 * p] = &rq[2 * p];
    rp[2 * p + 1] = &rq[2 * p + 1];
  }
  if (bad == 0 && rm__waitall(c, rp, 2 * w) != RM_OK) {
    fprintf(stderr, "rank %d: waitall: %s\n", me, rm_comm_last_error(c));
    bad++;
  }
  for (int p = 0; p < w && bad == 0; p++)
    for (size_t i = 0; p != me && i < n; i++)
      if (rb[p][i] != pat(p, me, c->coll_seq, i)) bad++;
  for (int p = 0; p < w; p++) {
    free(sb[p]);
    free(rb[p]);
  }
  free(sb);
  free(rb);
  free(rq);
  free(rp);
  return bad;
}

static int many_in_flight(rm_comm_t *c)
{
  enum { K = 16 };
  int right = (c->rank + 1) % c->world, left = (c->rank + c->world - 1) % c->world;
  uint64_t sv[K], rv[K];
  rm__req_t s[K], r[K];
  rm__req_t *all[2 * K];
  int bad = 0;
  if (rm__coll_begin(c) != RM_OK) return 1;
  for (int k = 0; k < K; k++) {
    sv[k] = (uint64_t)c->rank * 1000 + (uint64_t)k;
    rv[k] = 0;
    bad += rm__irecv(c, left, &rv[k], sizeof rv[k], (uint64_t)k, &r[k]) != RM_OK;
    bad += rm__isend(c, right, &sv[k], sizeof sv[k], (uint64_t)k, &s[k]) != RM_OK;
    all[k] = &r[k];
    all[K + k] = &s[k];
  }
  if (bad == 0 && rm__waitall(c, all, 2 * K) != RM_OK) bad++;
  for (int k = 0; k < K && bad == 0; k++)
    if (rv[k] != (uint64_t)left * 1000 + (uint64_t)k) bad++;
  return bad;
}

/* Ring shift of n bytes, `iters` times; returns wrong bytes, *mbps out. */
static int ring_shift(rm_comm_t *c, size_t n, int iters, double *mbps)
{
  int right = (c->rank + 1) % c->world, left = (c->rank + c->world - 1) % c->world;
  unsigned char *sb = malloc(n), *rb = malloc(n);
  int bad = 0;
  double t0;
  if (sb == NULL || rb == NULL) return 1;
  for (size_t i = 0; i < n; i++) sb[i] = (unsigned char)(i * 7 + (size_t)c->rank);
  t0 = rm_test_now_ms();
  for (int it = 0; it < iters && bad == 0; it++) {
    if (rm__coll_begin(c) != RM_OK ||
        rm__sendrecv(c, right, sb, n, 0, left, rb, n, 0) != RM_OK) {
      fprintf(stderr, "rank %d: ring shift: %s\n", c->rank, rm_comm_last_error(c));
      bad++;
    }
  }
  *mbps = (double)n * iters / 1e6 / ((rm_test_now_ms() - t0) / 1e3);
  for (size_t i = 0; i < n && bad == 0; i++)
    if (rb[i] != (unsigned char)(i * 7 + (size_t)left)) bad++;
  free(sb);
  free(rb);
  return bad;
}

static int rank_main(rm_test_world_t *h, int rank, void *arg)
{
  static const size_t sizes[] = {0, 1, 7, 1000, (1u << 20) + 3};
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_test_result_t *res = &h->res[rank];
  rm_status_t st;

  rm_test_config(h, rank, &cfg);
  st = rm_comm_init(&cfg, &c);
  res->status = st;
  if (st != RM_OK) return 0;
  if (rm_comm_rank(c) != rank || rm_comm_world(c) != h->world ||
      rm_comm_generation(c) != 1 || rm_comm_status(c) != RM_OK ||
      rm_comm_failed_peer(c) != -1 || rm_comm_last_error(c)[0] != '\0')
    res->bad++;
  /* rm_comm_set_timeout: bad deadlines refused, a good one is what the wait
   * loop reads next (then the configured one back for the traffic below) */
  {
    int was = c->timeout_ms;
    if (rm_comm_set_timeout(NULL, 1000) != RM_ERR_INVALID_ARG ||
        rm_comm_set_timeout(c, 0) != RM_ERR_INVALID_ARG ||
        rm_comm_set_timeout(c, -5) != RM_ERR_INVALID_ARG || c->timeout_ms != was ||
        rm_comm_set_timeout(c, 1234) != RM_OK || c->timeout_ms != 1234 ||
        rm_comm_set_timeout(c, was) != RM_OK)
      res->bad++;
  }
  if (h->world > 1) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      res->bad += all_pairs(c, sizes[i]);
    res->bad += many_in_flight(c);
    res->bad += ring_shift(c, h->world > 4 ? 8u << 20 : 32u << 20, 3, &res->value);
  }
  res->status = rm_comm_status(c);
  rm_comm_destroy(c);
  return 0;
}

int main(int argc, char **argv)
{
  int fails = 0;
  for (int a = 1; a < argc; a++) {
    rm_test_world_t h;
    int world = atoi(argv[a]);
    if (world < 1 || world > RM_TEST_MAX_WORLD) RM_TEST_FAIL("bad world %s", argv[a]);
    if (rm_test_world_open(&h, world) != 0) RM_TEST_FAIL("rm_test_world_open");
    rm_test_start(&h, rank_main, NULL);
    int bad = rm_test_wait(&h, 120000, -1);
    for (int r = 0; r < world; r++) {
      rm_test_result_t *res = &h.res[r];
      if (!res->done || res->status != RM_OK || res->bad != 0) {
        fprintf(stderr, "world %d rank %d: done=%d status=%s wrong=%d\n", world,
                r, res->done, rm_status_name(res->status), res->bad);
        bad++;
      }
    }
    printf("world %d: %s (ring shift rank 0: %.0f MB/s)\n", world,
           bad ? "FAIL" : "ok", h.res[0].value);
    fails += bad;
    rm_test_world_close(&h);
  }
  return fails ? 1 : 0;
}
