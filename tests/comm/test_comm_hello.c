/*
 * test_comm_hello - only the job's members get onto the TCP data plane.
 *
 * Real processes, real sockets (RINGMASTER_TRANSPORTS=tcp). The test
 * process plays the outsider with raw sockets against real ranks that hold
 * the generation's data-plane key (rm_comm_config_t.data_key).
 *
 *   case      what happens                                   must hold
 *   impostor  before rank 1 starts, outsiders dial rank 0    both real ranks
 *             with a correct HELLO for rank 1: one without   form, all-reduce
 *             a proof, one that answers the challenge with   gives 1 + 2; the
 *             a wrong MAC, one that never answers            outsiders are
 *                                                            closed
 *   replay    a fake rank 1 that knows the key completes     the replayed
 *             the challenge on connection A, then replays    proof is refused
 *             A's HELLO and A's proof on connection B        (B closed); A is
 *                                                            accepted, data
 *                                                            flows on it
 *   wrongkey  rank 1 holds another key                       both ranks fail
 *                                                            (RM_ERR_TIMEOUT)
 *   fakelisten rank 1 dials a fake rank 0 that answers its   rank 1 closes it
 *             challenge with a wrong MAC                     unproven, sends
 *                                                            no AUTH, re-dials
 *
 *   rdma_impostor  (verbs test double, RINGMASTER_TRANSPORTS=rdma,tcp;
 *             tests/rdma) before rank 0 starts, an outsider     both real ranks
 *             sends rank 1's bootstrap listener a HELLO          form; the
 *             claiming rank 0, without proof; another answers    outsiders are
 *             the challenge with a wrong proof                   refused
 *
 * "impostor" and "rdma_impostor" with RM_TEST_HELLO_NOKEY=1 run the ranks
 * without a key: that is the data plane before keys (the first claimant of a
 * rank wins), and both fail (the outsider holds the rank's place on the
 * link or its QP, the real rank never connects).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include "rm_testlib.h"

#include "addr.h"
#include "comm/comm_int.h"
#include "transport/hello_auth.h"
#include "transport/tcp/tcp_int.h"
#include "transport/transport.h"

static unsigned char g_key[RM_DATA_KEY_BYTES], g_other[RM_DATA_KEY_BYTES];

static int nokey(void)
{
  const char *v = getenv("RM_TEST_HELLO_NOKEY");
  return v && v[0] == '1';
}


/* Read exactly n bytes; n, or what came before EOF / error / timeout. */
static int get(int fd, void *p, int n)
{
  int got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)p + got, (size_t)(n - got));
    if (r <= 0) break;
    got += (int)r;
  }
  return got;
}

/* 1 when the peer closed fd (EOF or reset) without sending a byte, within
 * the receive timeout; 0 when it answered (or kept it open). */
static int closed_by_peer(int fd)
{
  char b[256];
  ssize_t r = read(fd, b, sizeof b);
  return r == 0 || (r < 0 && errno == ECONNRESET);
}

static void hello(unsigned char *out, uint64_t gen, int rank, uint64_t len)
{
  rm__frame_t f = {RM__TCP_MAGIC, RM__TCP_VERSION, RM__FRAME_HELLO, 42, gen,
                   (uint64_t)rank, 2, len};
  rm__frame_encode(&f, out);
}

/* A communicator shell with (job 42, gen 1, world 2) and key: what the
 * MAC functions read. */
static rm_comm_t *mac_shell(const unsigned char *key)
{
  rm_comm_t *c = calloc(1, sizeof *c);
  if (c == NULL) RM_TEST_FAIL("calloc");
  c->job_id = 42;
  c->generation = 1;
  c->world = 2;
  c->keyed = 1;
  memcpy(c->data_key, key, sizeof c->data_key);
  return c;
}

/* ---- real ranks ---- */

typedef struct rank_arg {
  int wait_go;       /* rank wait_go - 1 waits until its res[].value != 0 */
  int other_key;     /* rank 1 holds g_other */
  int connect_ms;
} rank_arg_t;

static int real_rank(rm_test_world_t *h, int rank, void *argp)
{
  const rank_arg_t *a = argp;
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_status_t st;
  float in = (float)(rank + 1), out = 0;

  if (rank == a->wait_go - 1) {
    double end = rm_test_now_ms() + 60000;
    while (*(volatile double *)&h->res[rank].value == 0 && rm_test_now_ms() < end)
      usleep(1000);
  }
  rm_test_config(h, rank, &cfg);
  if (a->connect_ms) cfg.connect_timeout_ms = a->connect_ms;
  if (!nokey()) cfg.data_key = rank == 1 && a->other_key ? g_other : g_key;
  if ((st = rm_comm_init(&cfg, &c)) != RM_OK) {
    h->res[rank].status = st;
    return 0;
  }
  st = rm_allreduce(c, &in, &out, 1, RM_F32, RM_SUM);
  if (st == RM_OK && out != 3.0f) h->res[rank].bad++;
  rm_test_finish(&h->res[rank], c, st);
  return 0;
}

static int run_impostor(void)
{
  rm_test_world_t h;
  rank_arg_t a = {2, 0, 0};
  unsigned char m[RM__TCP_HDR + 64], nonce[RM__AUTH_NONCE];
  int bad = 0, bare, wrong, silent;

  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, real_rank, &a);

  /* 1: a correct HELLO for rank 1 and nothing else */
  bare = rm_test_dial(h.addr[0], 15);
  hello(m, 1, 1, 0);
  rm_test_put(bare, m, RM__TCP_HDR);
  /* before keys, rank 0 answered and held rank 1's place from here on */
  int bare_refused = closed_by_peer(bare);
  printf("impostor: HELLO without proof %s\n",
         bare_refused ? "refused" : "ACCEPTED as rank 1");

  /* 2: a keyed-looking HELLO, then a wrong answer to the challenge */
  wrong = rm_test_dial(h.addr[0], 15);
  hello(m, 1, 1, RM__AUTH_NONCE);
  memset(nonce, 7, sizeof nonce);
  memcpy(m + RM__TCP_HDR, nonce, sizeof nonce);
  rm_test_put(wrong, m, RM__TCP_HDR + RM__AUTH_NONCE);
  int wrong_refused = 0;
  if (get(wrong, m, RM__TCP_HDR + 64) == RM__TCP_HDR + 64) {
    rm__frame_t f = {RM__TCP_MAGIC, RM__TCP_VERSION, RM__FRAME_AUTH, 42, 1, 1, 2,
                     RM__AUTH_MAC};
    rm__frame_encode(&f, m);
    memset(m + RM__TCP_HDR, 0x5a, RM__AUTH_MAC);
    rm_test_put(wrong, m, RM__TCP_HDR + RM__AUTH_MAC);
    wrong_refused = closed_by_peer(wrong);
  } else {
    wrong_refused = 1; /* refused at its HELLO (unkeyed rank 0) */
  }
  printf("impostor: wrong answer to the challenge %s\n",
         wrong_refused ? "refused" : "ACCEPTED");

  /* 3: a keyed-looking HELLO that never answers: holds no place */
  silent = rm_test_dial(h.addr[0], 15);
  hello(m, 1, 1, RM__AUTH_NONCE);
  memcpy(m + RM__TCP_HDR, nonce, sizeof nonce);
  rm_test_put(silent, m, RM__TCP_HDR + RM__AUTH_NONCE);

  *(volatile double *)&h.res[1].value = 1.0; /* go, the real rank 1 */
  bad += rm_test_wait(&h, 60000, -1);
  /* its challenge came (keyed), then the end once rank 0 formed */
  int silent_closed = (nokey() || get(silent, m, RM__TCP_HDR + 64) == RM__TCP_HDR + 64) &&
                      closed_by_peer(silent);
  for (int r = 0; r < 2; r++) {
    printf("impostor: rank %d: %s: %s\n", r, rm_status_name(h.res[r].status), h.res[r].msg);
    if (!h.res[r].done || h.res[r].status != RM_OK || h.res[r].bad) bad++;
  }
  if (!bare_refused || !wrong_refused || !silent_closed) bad++;
  close(bare);
  close(wrong);
  close(silent);
  rm_test_world_close(&h);
  return bad;
}

/* Rank 0 alone; rank 1 is the test. Receives 1000 bytes from rank 1. */
static int real_rank0_recv(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_status_t st;
  unsigned char buf[1000];
  rm__req_t rq;

  rm_test_config(h, 0, &cfg);
  cfg.world = 2;
  cfg.data_key = g_key;
  if ((st = rm_comm_init(&cfg, &c)) != RM_OK) {
    h->res[0].status = st;
    return 0;
  }
  memset(buf, 0, sizeof buf);
  st = rm__coll_begin(c);
  if (st == RM_OK) st = rm__irecv(c, 1, buf, sizeof buf, 0, &rq);
  if (st == RM_OK) st = rm__wait(c, &rq);
  for (int i = 0; st == RM_OK && i < (int)sizeof buf; i++)
    if (buf[i] != (unsigned char)(i * 3)) h->res[0].bad++;
  rm_test_finish(&h->res[0], c, st);
  return 0;
}

/* Connect as rank 1 with nonce_d; the reply's nonce_l (its MAC checked). */
static int challenge(const char *addr, const rm_comm_t *k, const unsigned char *nonce_d,
                     rm__auth_ctx_t *x)
{
  unsigned char m[RM__TCP_HDR + 64];
  int fd = rm_test_dial(addr, 15);
  hello(m, 1, 1, RM__AUTH_NONCE);
  memcpy(m + RM__TCP_HDR, nonce_d, RM__AUTH_NONCE);
  rm_test_put(fd, m, RM__TCP_HDR + RM__AUTH_NONCE);
  if (get(fd, m, sizeof m) != (int)sizeof m) RM_TEST_FAIL("no keyed HELLO reply");
  x->dialer = 1;
  x->listener = 0;
  memcpy(x->nonce_d, nonce_d, RM__AUTH_NONCE);
  memcpy(x->nonce_l, m + RM__TCP_HDR, RM__AUTH_NONCE);
  if (!rm__auth_check(k, x, RM__AUTH_LISTENER, m + RM__TCP_HDR + RM__AUTH_NONCE))
    RM_TEST_FAIL("rank 0's MAC does not check out with the shared key");
  return fd;
}

static void send_auth(int fd, const unsigned char *mac)
{
  unsigned char m[RM__TCP_HDR + RM__AUTH_MAC];
  rm__frame_t f = {RM__TCP_MAGIC, RM__TCP_VERSION, RM__FRAME_AUTH, 42, 1, 1, 2,
                   RM__AUTH_MAC};
  rm__frame_encode(&f, m);
  memcpy(m + RM__TCP_HDR, mac, RM__AUTH_MAC);
  rm_test_put(fd, m, sizeof m);
}

static int run_replay(void)
{
  rm_test_world_t h;
  rm_comm_t *k = mac_shell(g_key);
  rm__auth_ctx_t xa, xb;
  unsigned char nonce[RM__AUTH_NONCE], mac_a[RM__AUTH_MAC];
  int bad, fa, fb;

  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  h.peers[1] = "127.0.0.1:1"; /* never dialled by rank 0 */
  rm_test_start_rank0(&h, real_rank0_recv, NULL);
  rm__auth_nonce(nonce);
  fa = challenge(h.addr[0], k, nonce, &xa);
  rm__auth_mac(k, &xa, RM__AUTH_DIALER, mac_a);
  /* the recorded HELLO and proof of A, replayed on B */
  fb = challenge(h.addr[0], k, nonce, &xb);
  int fresh = memcmp(xa.nonce_l, xb.nonce_l, RM__AUTH_NONCE) != 0;
  send_auth(fb, mac_a);
  int replay_refused = closed_by_peer(fb);
  printf("replay: rank 0's nonce %s; replayed proof %s\n", fresh ? "fresh" : "REUSED",
         replay_refused ? "refused" : "ACCEPTED");
  /* A itself proves, and carries data */
  send_auth(fa, mac_a);
  {
    unsigned char m[RM__TCP_HDR], data[1000];
    rm__frame_t f = {RM__TCP_MAGIC, RM__TCP_VERSION, RM__FRAME_DATA, 42, 1, 1, 0, 1000};
    for (int i = 0; i < (int)sizeof data; i++) data[i] = (unsigned char)(i * 3);
    rm__frame_encode(&f, m);
    rm_test_put(fa, m, sizeof m);
    rm_test_put(fa, data, sizeof data);
  }
  bad = rm_test_wait_rank0(&h, 30000);
  printf("replay: rank 0: %s: %s\n", rm_status_name(h.res[0].status), h.res[0].msg);
  if (!fresh || !replay_refused || !h.res[0].done || h.res[0].status != RM_OK ||
      h.res[0].bad)
    bad++;
  close(fa);
  close(fb);
  free(k);
  rm_test_world_close(&h);
  return bad;
}

static int run_wrongkey(void)
{
  rm_test_world_t h;
  rank_arg_t a = {0, 1, 1500};
  int bad;
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, real_rank, &a);
  bad = rm_test_wait(&h, 30000, -1);
  for (int r = 0; r < 2; r++) {
    printf("wrongkey: rank %d: %s\n", r, rm_status_name(h.res[r].status));
    if (!h.res[r].done || h.res[r].status != RM_ERR_TIMEOUT) bad++;
  }
  rm_test_world_close(&h);
  return bad;
}

/* Rank 1 alone; rank 0 is the test, listening on its own socket. */
static int real_rank1_only(rm_test_world_t *h, int rank, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_test_config(h, 1, &cfg);
  cfg.data_key = g_key;
  cfg.connect_timeout_ms = 5000;
  h->res[1].status = rm_comm_init(&cfg, &c);
  if (c) rm_test_finish(&h->res[1], c, RM_OK);
  return 0;
}

static int run_fakelisten(void)
{
  rm_test_world_t h;
  unsigned char m[RM__TCP_HDR + 64];
  rm__frame_t f;
  int bad, lfd, fd, redialled = 0, proof_sent = 0;
  struct timeval tv = {10, 0};

  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  lfd = rm__endpoint_fd(h.ep[0]); /* rank 0's port, served by the test */
  /* fork rank 1 only: world 2 with rank 0 skipped */
  fflush(NULL);
  pid_t p = fork();
  if (p < 0) RM_TEST_FAIL("fork");
  if (p == 0) {
    rm_endpoint_close(h.ep[0]);
    h.ep[0] = NULL;
    real_rank1_only(&h, 1, NULL);
    h.res[1].done = 1;
    exit(0);
  }
  h.pid[0] = -1;
  h.pid[1] = p;
  struct pollfd pf = {lfd, POLLIN, 0};
  if (poll(&pf, 1, 10000) != 1 || (fd = accept(lfd, NULL, NULL)) < 0)
    RM_TEST_FAIL("rank 1 never dialled");
  {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (get(fd, m, RM__TCP_HDR + RM__AUTH_NONCE) != RM__TCP_HDR + RM__AUTH_NONCE)
    RM_TEST_FAIL("rank 1 sent no keyed HELLO");
  /* answer with a nonce and a MAC made without the key */
  hello(m, 1, 0, 64);
  memset(m + RM__TCP_HDR, 0x33, 64);
  rm_test_put(fd, m, RM__TCP_HDR + 64);
  /* rank 1 must not prove itself to us: it closes (EOF) without an AUTH */
  int n = get(fd, m, RM__TCP_HDR);
  if (n == RM__TCP_HDR) {
    rm__frame_decode(m, &f);
    proof_sent = f.type == RM__FRAME_AUTH;
  }
  close(fd);
  /* and dials again, looking for the real rank 0 */
  if (poll(&pf, 1, 10000) == 1 && (fd = accept(lfd, NULL, NULL)) >= 0) {
    redialled = 1;
    close(fd);
  }
  if (waitpid(p, &h.status[1], 0) != p) RM_TEST_FAIL("waitpid");
  h.pid[1] = -1;
  printf("fakelisten: rank 1 %s, %s; ended %s: %s\n",
         proof_sent ? "SENT ITS PROOF" : "sent no proof",
         redialled ? "re-dialled" : "did NOT re-dial", rm_status_name(h.res[1].status),
         h.res[1].msg);
  bad = proof_sent || !redialled || h.res[1].status != RM_ERR_TIMEOUT ||
        !WIFEXITED(h.status[1]) || WEXITSTATUS(h.status[1]) != 0;
  rm_test_world_close(&h);
  return bad;
}

/* RDMA bootstrap (run with the verbs test double and RINGMASTER_TRANSPORTS
 * =rdma,tcp): there rank 0 dials rank 1's bootstrap listener. Before rank 0
 * starts, an outsider sends rank 1 a well-formed HELLO claiming rank 0,
 * without proof. Before keys, rank 1 connected its QP to the outsider's
 * and refused the real rank 0 as a duplicate. */
static int run_rdma_impostor(void)
{
  rm_test_world_t h;
  rank_arg_t a = {1, 0, 0};
  unsigned char m[96];
  char boot[64];
  int bad = 0, fd;
  const char *t;

  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  if ((t = strstr(h.offer[1], "rdma:")) == NULL || (t = strchr(t, '/')) == NULL)
    RM_TEST_FAIL("rank 1 offers no rdma (\"%s\"): run with the verbs test double",
                 h.offer[1]);
  snprintf(boot, sizeof boot, "%.*s", (int)strcspn(t + 1, " "), t + 1);
  rm_test_start(&h, real_rank, &a);
  fd = rm_test_dial(boot, 15);
  memset(m, 0, sizeof m);
  memcpy(m, "RMRH", 4);
  m[4] = 1; /* version */
  m[8] = 42; /* job */
  m[16] = 1; /* generation */
  /* rank 0 (offset 24) */
  m[28] = 2; /* world */
  m[32] = 7; /* a QP number */
  m[58] = 3; /* mtu 1024 */
  m[60] = 64; /* CTS slots */
  rm_test_put(fd, m, sizeof m);
  int refused = closed_by_peer(fd);
  printf("rdma impostor: HELLO without proof %s\n", refused ? "refused" : "ANSWERED");
  /* a keyed HELLO, then a wrong answer to the challenge */
  int wrong_refused = 1, wfd = -1;
  if (!nokey()) {
    unsigned char k[160], reply[160], proof[64];
    memcpy(k, m, sizeof m);
    k[7] = 1;
    memset(k + 96, 9, 64);
    wfd = rm_test_dial(boot, 15);
    rm_test_put(wfd, k, sizeof k);
    if (get(wfd, reply, sizeof reply) != (int)sizeof reply) RM_TEST_FAIL("no keyed reply");
    memset(proof, 0x5a, sizeof proof);
    memcpy(proof, "RMRC", 4);
    memset(proof + 4, 0, 4);
    proof[4] = 5; /* PROOF; the MAC after the 32 bytes stays 0x5a... */
    memset(proof + 8, 0, 16);
    memset(proof + 24, 0, 8);
    proof[24] = 1; /* generation */
    rm_test_put(wfd, proof, sizeof proof);
    wrong_refused = closed_by_peer(wfd);
    printf("rdma impostor: wrong proof %s\n", wrong_refused ? "refused" : "ACCEPTED");
  }
  *(volatile double *)&h.res[0].value = 1.0; /* go, the real rank 0 */
  bad += rm_test_wait(&h, 60000, -1);
  for (int r = 0; r < 2; r++) {
    printf("rdma impostor: rank %d: %s: %s\n", r, rm_status_name(h.res[r].status),
           h.res[r].msg);
    if (!h.res[r].done || h.res[r].status != RM_OK || h.res[r].bad) bad++;
  }
  if (!refused || !wrong_refused) bad++;
  close(fd);
  if (wfd >= 0) close(wfd);
  rm_test_world_close(&h);
  return bad;
}

int main(int argc, char **argv)
{
  int bad = 0;
  const char *only = argc > 1 ? argv[1] : NULL;
  memset(g_key, 0x11, sizeof g_key);
  memset(g_other, 0x22, sizeof g_other);
  if (!only || !strcmp(only, "impostor")) bad += run_impostor();
  if (!only || !strcmp(only, "replay")) bad += run_replay();
  if (!only || !strcmp(only, "wrongkey")) bad += run_wrongkey();
  if (!only || !strcmp(only, "fakelisten")) bad += run_fakelisten();
  if (only && !strcmp(only, "rdma_impostor")) bad += run_rdma_impostor();
  printf("hello: %s\n", bad ? "FAIL" : "ok");
  return bad ? 1 : 0;
}
