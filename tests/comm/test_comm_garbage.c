/*
 * test_comm_garbage - hostile bytes on a rank's data port.
 *
 * Rank 0 is a real process (rm_comm_init, world 2); the test process plays
 * rank 1 over raw sockets. Before its proper HELLO it opens stray
 * connections (HTTP-like garbage, a truncated header, a HELLO for another
 * job): rank 0 must reject them and still connect. Then, per case, rank 0
 * posts a 1000-byte receive and the fake peer sends one bad thing:
 *
 *   case      fake peer sends                         rank 0 must return
 *   good      a correct DATA frame                    RM_OK, bytes intact
 *   magic     48 bytes of garbage                     RM_ERR_PROTOCOL
 *   trunc     a header for 1000 bytes, 100, then EOF  RM_ERR_PEER_LOST
 *   length    a header claiming 2^62 bytes            RM_ERR_PROTOCOL
 *   gen       a DATA frame of another generation      RM_ERR_STALE_GENERATION
 *   seq       a DATA frame of another collective      RM_ERR_PROTOCOL
 * and in every failing case failed_peer == 1. Run also under ASan/UBSan.
 * Last, "stash": a HELLO for generation 2 that arrives while rank 0 forms
 * generation 1 is parked on the endpoint and used by generation 2.
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

#include <sys/time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "rm_testlib.h"

#include "addr.h"
#include "comm/comm_int.h"
#include "transport/tcp/tcp_int.h"
#include "transport/transport.h"

enum { C_GOOD, C_MAGIC, C_TRUNC, C_LENGTH, C_GEN, C_SEQ, C_COUNT };
static const char *const names[C_COUNT] = {"good", "magic", "trunc",
                                           "length", "gen", "seq"};
static const rm_status_t expect[C_COUNT] = {
    RM_OK, RM_ERR_PROTOCOL, RM_ERR_PEER_LOST,
    RM_ERR_PROTOCOL, RM_ERR_STALE_GENERATION, RM_ERR_PROTOCOL};

static const char *g_fake_addr = "127.0.0.1:1"; /* never dialled by rank 0 */

/* Receive 1000 bytes from rank 1 in the communicator's first collective,
 * record the outcome, destroy. */
static void real_rank0_recv(rm_comm_t *c, rm_test_result_t *res)
{
  unsigned char buf[1000];
  rm__req_t rq;
  rm_status_t st;

  memset(buf, 0, sizeof buf);
  st = rm__coll_begin(c);
  if (st == RM_OK) st = rm__irecv(c, 1, buf, sizeof buf, 0, &rq);
  if (st == RM_OK) st = rm__wait(c, &rq);
  for (int i = 0; st == RM_OK && i < (int)sizeof buf; i++)
    if (buf[i] != (unsigned char)(i * 3)) res->bad++;
  rm_test_finish(res, c, st);
}

static int real_rank0(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_status_t st;

  rm_test_config(h, 0, &cfg);
  cfg.world = 2; /* the parent forked us with h->world = 1 */
  cfg.timeout_ms = 5000;
  if ((st = rm_comm_init(&cfg, &c)) != RM_OK) {
    h->res[0].status = st;
    return 0;
  }
  real_rank0_recv(c, &h->res[0]);
  return 0;
}

static void frame(unsigned char *out, int type, uint64_t job, uint64_t gen,
                  uint64_t seq, uint64_t tag, uint64_t len)
{
  rm__frame_t f = {RM__TCP_MAGIC, RM__TCP_VERSION, (uint16_t)type, job, gen,
                   seq, tag, len};
  rm__frame_encode(&f, out);
}

/* Stray connections, then the real handshake; returns the data fd. */
static int fake_connect(rm_test_world_t *h)
{
  unsigned char hdr[RM__TCP_HDR];
  const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxx";
  int fd;

  fd = rm_test_dial(h->addr[0], 0);
  rm_test_put(fd, http, RM__TCP_HDR);
  close(fd);
  fd = rm_test_dial(h->addr[0], 0);
  rm_test_put(fd, "RMFR", 4);
  close(fd);
  fd = rm_test_dial(h->addr[0], 0);
  frame(hdr, RM__FRAME_HELLO, 7, 1, 1, 2, 0); /* another job */
  rm_test_put(fd, hdr, sizeof hdr);
  close(fd);

  fd = rm_test_dial(h->addr[0], 0);
  frame(hdr, RM__FRAME_HELLO, 42, 1, 1, 2, 0);
  rm_test_put(fd, hdr, sizeof hdr);
  if (read(fd, hdr, sizeof hdr) != (ssize_t)sizeof hdr) RM_TEST_FAIL("no HELLO reply");
  rm__frame_t f;
  rm__frame_decode(hdr, &f);
  if (f.type != RM__FRAME_HELLO || f.seq != 0) RM_TEST_FAIL("bad HELLO reply");
  return fd;
}

static void fake_send(int fd, int cs)
{
  unsigned char hdr[RM__TCP_HDR], data[1000];
  for (int i = 0; i < (int)sizeof data; i++) data[i] = (unsigned char)(i * 3);
  switch (cs) {
  case C_GOOD: frame(hdr, RM__FRAME_DATA, 42, 1, 1, 0, 1000); break;
  case C_MAGIC: memset(hdr, 0xa5, sizeof hdr); break;
  case C_TRUNC: frame(hdr, RM__FRAME_DATA, 42, 1, 1, 0, 1000); break;
  case C_LENGTH: frame(hdr, RM__FRAME_DATA, 42, 1, 1, 0, 1ull << 62); break;
  case C_GEN: frame(hdr, RM__FRAME_DATA, 42, 9, 1, 0, 1000); break;
  case C_SEQ: frame(hdr, RM__FRAME_DATA, 42, 1, 5, 0, 1000); break;
  }
  rm_test_put(fd, hdr, sizeof hdr);
  rm_test_put(fd, data, cs == C_TRUNC ? 100 : sizeof data);
  if (cs == C_TRUNC) shutdown(fd, SHUT_WR);
}

static int run_case(int cs)
{
  rm_test_world_t h;
  int bad, fd;
  char buf[256];
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  h.peers[1] = g_fake_addr;
  rm_test_start_rank0(&h, real_rank0, NULL); /* fork only rank 0; rank 1 is us */
  h.pid[1] = -1;
  fd = fake_connect(&h);
  fake_send(fd, cs);
  /* keep the connection open until rank 0 is done (except trunc) */
  double end = rm_test_now_ms() + 30000;
  while (!h.res[0].done && rm_test_now_ms() < end) usleep(2000);
  while (read(fd, buf, sizeof buf) > 0) {
  }
  close(fd);
  bad = rm_test_wait_rank0(&h, 30000);
  rm_test_result_t *r = &h.res[0];
  printf("%-7s rank 0: %s peer %d: %s\n", names[cs], rm_status_name(r->status),
         r->failed_peer, r->msg);
  if (!r->done || r->status != (int)expect[cs] || r->bad ||
      (cs != C_GOOD && r->failed_peer != 1))
    bad++;
  rm_test_world_close(&h);
  return bad;
}

/* Early arrival: the fake peer sends its generation-2 HELLO while rank 0 is
 * still forming generation 1. Rank 0 must keep that connection on its
 * endpoint, finish generation 1 on a second connection, and answer the
 * parked one in generation 2's init; data then flows on it. */
static int real_rank0_two_gens(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_test_result_t *res = &h->res[0];
  rm_status_t st;

  rm_test_config(h, 0, &cfg);
  cfg.world = 2;
  if ((st = rm_comm_init(&cfg, &c)) != RM_OK) {
    res->status = st;
    return 0;
  }
  rm_comm_destroy(c);
  cfg.generation = 2;
  if ((st = rm_comm_init(&cfg, &c)) != RM_OK) {
    res->status = st;
    return 0;
  }
  real_rank0_recv(c, res);
  return 0;
}

static int run_stash(void)
{
  rm_test_world_t h;
  unsigned char hdr[RM__TCP_HDR];
  struct timeval tv = {10, 0};
  rm__frame_t f;
  int bad, early, now;
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  h.peers[1] = g_fake_addr;
  rm_test_start_rank0(&h, real_rank0_two_gens, NULL);
  early = rm_test_dial(h.addr[0], 0);
  setsockopt(early, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  frame(hdr, RM__FRAME_HELLO, 42, 2, 1, 2, 0);
  rm_test_put(early, hdr, sizeof hdr);
  usleep(100 * 1000); /* rank 0 reads it during generation 1's init */
  now = rm_test_dial(h.addr[0], 0);
  frame(hdr, RM__FRAME_HELLO, 42, 1, 1, 2, 0);
  rm_test_put(now, hdr, sizeof hdr);
  if (read(now, hdr, sizeof hdr) != (ssize_t)sizeof hdr) RM_TEST_FAIL("no gen-1 reply");
  if (read(early, hdr, sizeof hdr) != (ssize_t)sizeof hdr) RM_TEST_FAIL("no gen-2 reply");
  rm__frame_decode(hdr, &f);
  if (f.type != RM__FRAME_HELLO || f.generation != 2) RM_TEST_FAIL("bad gen-2 reply");
  {
    unsigned char data[1000];
    for (int i = 0; i < (int)sizeof data; i++) data[i] = (unsigned char)(i * 3);
    frame(hdr, RM__FRAME_DATA, 42, 2, 1, 0, 1000);
    rm_test_put(early, hdr, sizeof hdr);
    rm_test_put(early, data, sizeof data);
  }
  bad = rm_test_wait_rank0(&h, 30000);
  printf("stash   rank 0: %s: %s\n", rm_status_name(h.res[0].status), h.res[0].msg);
  if (!h.res[0].done || h.res[0].status != RM_OK || h.res[0].bad) bad++;
  close(early);
  close(now);
  rm_test_world_close(&h);
  return bad;
}

int main(void)
{
  int bad = 0;
  for (int cs = 0; cs < C_COUNT; cs++) bad += run_case(cs);
  bad += run_stash();
  printf("garbage: %s\n", bad ? "FAIL" : "ok");
  return bad ? 1 : 0;
}
