/*
 * test_rdma_tp - the RDMA transport over the verbs test double
 * (tests/rdma_emu), real processes, white-box through the static library.
 * CTest sets RINGMASTER_IBVERBS_LIB and RINGMASTER_TRANSPORTS=rdma,tcp.
 *
 *   fallback  RM_VERBS_EMU_DEVICES=0 (no device): no rdma token is offered,
 *             TCP carries the pair, an allreduce works.
 *   mismatch  2 ranks: rank 0 sends 100 bytes, rank 1 posts a 200-byte
 *             receive: rank 0 (which checks the clear-to-send) fails
 *             RM_ERR_PROTOCOL naming rank 1; rank 1 fails naming rank 0;
 *             rank 1's buffer is untouched.
 *   large     2 ranks exchange 64 MiB + 3 bytes at an odd offset, several
 *             rounds with freshly allocated buffers (registration cache
 *             churn; CTest runs it again with RINGMASTER_REG_CACHE=0, where
 *             no registration may outlive its message), every byte checked.
 *   register  3 ranks: rm_comm_register of a 1 MiB buffer registers it at
 *             once (1 registration over RDMA, none over TCP); 10 ring
 *             all-reduces in place on it are exact and, after the first
 *             (which registers the scratch), register nothing more;
 *             bad arguments are RM_ERR_INVALID_ARG; deregistering frees the
 *             entry. CTest runs it over RDMA and over TCP.
 *   churn     3 ranks, 30 communicators one after another on the same
 *             endpoints (generations 1..30), one allreduce each; the open
 *             fd count must not grow.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_testlib.h"

#include "comm/comm_int.h"
#include "transport/mr.h"
#include "transport/transport.h"

static unsigned char pat(size_t i, int who, int round)
{
  return (unsigned char)(i * 2654435761u >> 13) ^ (unsigned char)(who * 31 + round * 7);
}

static int fallback_fn(rm_comm_t *c, void *arg)
{
  float v = 1.0f;
  const char *t = rm_comm_transport(c, 1 - rm_comm_rank(c));
  (void)arg;
  if (t == NULL || strcmp(t, "tcp") != 0) {
    fprintf(stderr, "rank %d: pair carried by %s, expected tcp\n", rm_comm_rank(c),
            t ? t : "(none)");
    return 1;
  }
  if (rm_allreduce(c, &v, &v, 1, RM_F32, RM_SUM) != RM_OK || v != 2.0f) return 1;
  return 0;
}

static int run_fallback(void)
{
  rm_test_world_t h;
  int bad;
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  for (int r = 0; r < 2; r++)
    if (strstr(h.offer[r], "rdma") != NULL) RM_TEST_FAIL("offer \"%s\" has rdma", h.offer[r]);
  rm_test_world_close(&h);
  bad = rm_test_run(2, fallback_fn, NULL, 60000);
  return bad;
}

static int mismatch_rank(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  unsigned char buf[200];
  rm_status_t st;
  rm_test_config(h, rank, &cfg);
  if ((h->res[rank].status = rm_comm_init(&cfg, &c)) != RM_OK) return 0;
  memset(buf, 0x5A, sizeof buf);
  st = rm__coll_begin(c);
  if (st == RM_OK && rank == 0) st = rm__sendrecv(c, 1, buf, 100, 0, -1, NULL, 0, 0);
  if (st == RM_OK && rank == 1) {
    memset(buf, 0xEE, sizeof buf);
    st = rm__sendrecv(c, -1, NULL, 0, 0, 0, buf, 200, 0);
  }
  for (size_t i = 0; rank == 1 && i < sizeof buf; i++)
    if (buf[i] != 0xEE) {
      h->res[rank].bad++;
      break;
    }
  rm_test_finish(&h->res[rank], c, st);
  return 0;
}

static int run_mismatch(void)
{
  rm_test_world_t h;
  int bad;
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, mismatch_rank, NULL);
  bad = rm_test_wait(&h, 60000, -1);
  for (int r = 0; r < 2; r++)
    printf("rank %d: %s peer %d bad %d: %s\n", r, rm_status_name(h.res[r].status),
           h.res[r].failed_peer, h.res[r].bad, h.res[r].msg);
  if (h.res[0].status != RM_ERR_PROTOCOL || h.res[0].failed_peer != 1) bad++;
  if (h.res[1].status == RM_OK || h.res[1].failed_peer != 0 || h.res[1].bad) bad++;
  bad += rm_test_shm_leftovers(&h);
  rm_test_world_close(&h);
  return bad;
}

static int large_rank(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  size_t n = (64u << 20) + 3;
  rm_status_t st = RM_OK;
  rm_test_config(h, rank, &cfg);
  cfg.timeout_ms = 30000;
  if ((h->res[rank].status = rm_comm_init(&cfg, &c)) != RM_OK) return 0;
  for (int round = 0; round < 4 && st == RM_OK; round++) {
    unsigned char *sb = malloc(n + 1), *rb = malloc(n + 1);
    if (sb == NULL || rb == NULL) {
      h->res[rank].bad++;
      free(sb);
      free(rb);
      break;
    }
    for (size_t i = 0; i < n; i++) sb[i + 1] = pat(i, rank, round);
    memset(rb, 0, n + 1);
    st = rm__coll_begin(c);
    if (st == RM_OK)
      st = rm__sendrecv(c, 1 - rank, sb + 1, n, 5, 1 - rank, rb + 1, n, 5);
    for (size_t i = 0; st == RM_OK && i < n; i++)
      if (rb[i + 1] != pat(i, 1 - rank, round)) {
        fprintf(stderr, "rank %d round %d: byte %zu wrong\n", rank, round, i);
        h->res[rank].bad++;
        break;
      }
    if (st == RM_OK && getenv("RINGMASTER_REG_CACHE") &&
        strcmp(getenv("RINGMASTER_REG_CACHE"), "0") == 0) {
      rm__mr_stats_t ms;
      rm__mr_stats(c, &ms);
      if (ms.entries != 0) {
        fprintf(stderr, "rank %d round %d: %d registrations kept with the cache off\n", rank,
                round, ms.entries);
        h->res[rank].bad++;
      }
    }
    free(sb);
    free(rb);
  }
  rm_test_finish(&h->res[rank], c, st);
  return 0;
}

#define REG_CHECK(cond, ...)                                                          \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "rank %d: %s: ", rank, #cond);                                  \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fprintf(stderr, "\n");                                                          \
      h->res[rank].bad++;                                                             \
    }                                                                                 \
  } while (0)

static int register_rank(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  size_t n = (1u << 18) + 5; /* floats: 1 MiB + 20 bytes */
  float *buf = NULL;
  rm_mr_t *mr = NULL, *junk = NULL;
  rm__mr_stats_t s0, s1, s2;
  rm_status_t st = RM_OK;
  int over_rdma, dummy = 0;
  (void)arg;
  rm_test_config(h, rank, &cfg);
  if ((h->res[rank].status = rm_comm_init(&cfg, &c)) != RM_OK) return 0;
  over_rdma = strcmp(rm_comm_transport(c, (rank + 1) % 3), "rdma") == 0;
  if (posix_memalign((void **)&buf, 64, n * sizeof *buf) != 0) {
    h->res[rank].bad++;
    rm_test_finish(&h->res[rank], c, RM_ERR_NOMEM);
    return 0;
  }
  REG_CHECK(rm_comm_register(c, NULL, 8, &junk) == RM_ERR_INVALID_ARG && junk == NULL, "NULL");
  REG_CHECK(rm_comm_register(c, buf, 0, &junk) == RM_ERR_INVALID_ARG, "empty range");
  REG_CHECK(rm_comm_deregister(c, (rm_mr_t *)&dummy) == RM_ERR_INVALID_ARG, "foreign handle");
  st = rm_comm_register(c, buf, n * sizeof *buf, &mr);
  REG_CHECK(st == RM_OK && mr != NULL, "register: %s", rm_status_name(st));
  rm__mr_stats(c, &s0);
  REG_CHECK(s0.entries == 1 && s0.regs == (uint64_t)(over_rdma ? 1 : 0),
            "after register: %d entries, %llu registrations (over %s)", s0.entries,
            (unsigned long long)s0.regs, over_rdma ? "rdma" : "tcp");
  for (int round = 0; round < 10 && st == RM_OK; round++) {
    for (size_t i = 0; i < n; i++) buf[i] = (float)((i % 97) + rank * 3 + round);
    st = rm_allreduce_ex(c, buf, buf, n, RM_F32, RM_SUM, RM_ALGO_RING, NULL);
    for (size_t i = 0; st == RM_OK && i < n; i++)
      if (buf[i] != (float)(3 * (i % 97) + 9 + 3 * round)) {
        fprintf(stderr, "rank %d round %d: element %zu = %g\n", rank, round, i, buf[i]);
        h->res[rank].bad++;
        break;
      }
    if (round == 0) rm__mr_stats(c, &s1);
  }
  rm__mr_stats(c, &s2);
  REG_CHECK(s2.regs == s1.regs, "rounds 2-10 registered %llu more",
            (unsigned long long)(s2.regs - s1.regs));
  if (over_rdma)
    REG_CHECK(s2.hits >= s1.hits + 9 * 2 * 2, "rounds 2-10: %llu cache hits",
              (unsigned long long)(s2.hits - s1.hits));
  else
    REG_CHECK(s2.regs == 0 && s2.hits == 0, "tcp registered %llu", (unsigned long long)s2.regs);
  REG_CHECK(rm_comm_deregister(c, mr) == RM_OK, "deregister");
  rm__mr_stats(c, &s1);
  REG_CHECK(s1.entries == s2.entries - 1, "%d entries after deregister, %d before",
            s1.entries, s2.entries);
  REG_CHECK(rm_comm_deregister(c, mr) == RM_ERR_INVALID_ARG, "deregister twice");
  rm_test_finish(&h->res[rank], c, st);
  free(buf);
  return 0;
}

static int churn_rank(rm_test_world_t *h, int rank, void *arg)
{
  int fds0 = -1;
  rm_status_t st = RM_OK;
  for (int g = 1; g <= 30 && st == RM_OK; g++) {
    rm_comm_config_t cfg;
    rm_comm_t *c = NULL;
    double v = rank + 1;
    rm_test_config(h, rank, &cfg);
    cfg.generation = (uint64_t)g;
    if ((st = rm_comm_init(&cfg, &c)) != RM_OK) break;
    st = rm_allreduce(c, &v, &v, 1, RM_F64, RM_SUM);
    if (st == RM_OK && v != 6.0) h->res[rank].bad++;
    if (st == RM_OK && strcmp(rm_comm_transport(c, (rank + 1) % 3), "rdma") != 0)
      h->res[rank].bad++;
    rm_comm_destroy(c);
    if (g == 2) fds0 = rm_test_open_fds();
  }
  if (fds0 >= 0 && rm_test_open_fds() > fds0) {
    fprintf(stderr, "rank %d: %d fds open, %d after generation 2\n", rank,
            rm_test_open_fds(), fds0);
    h->res[rank].bad++;
  }
  h->res[rank].status = st;
  return 0;
}

static int run_all_ok(int world, rm_test_rank_fn fn)
{
  rm_test_world_t h;
  int bad;
  if (rm_test_world_open(&h, world) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, fn, NULL);
  bad = rm_test_wait(&h, 240000, -1);
  for (int r = 0; r < world; r++) {
    printf("rank %d: %s bad %d %s\n", r, rm_status_name(h.res[r].status), h.res[r].bad,
           h.res[r].msg);
    if (h.res[r].status != RM_OK || h.res[r].bad) bad++;
  }
  bad += rm_test_shm_leftovers(&h);
  rm_test_world_close(&h);
  return bad;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  int bad;
  if (strcmp(mode, "fallback") == 0) bad = run_fallback();
  else if (strcmp(mode, "mismatch") == 0) bad = run_mismatch();
  else if (strcmp(mode, "large") == 0) bad = run_all_ok(2, large_rank);
  else if (strcmp(mode, "register") == 0) bad = run_all_ok(3, register_rank);
  else if (strcmp(mode, "churn") == 0) bad = run_all_ok(3, churn_rank);
  else RM_TEST_FAIL("unknown mode \"%s\"", mode);
  printf("%s: %s\n", mode, bad ? "FAIL" : "ok");
  return bad ? 1 : 0;
}
