/*
 * tcp_endpoint.c - rm_endpoint_t: a listening TCP socket that a worker keeps
 * across generations, plus socket helpers for the handshake.
 *
 * Early arrivals: while one generation's rm_comm_init runs, a peer that has
 * already moved to a later generation may connect. Its connection and HELLO
 * are stashed on the endpoint (at most RM__STASH_MAX) and handed to the
 * rm_comm_init of that generation, so nobody has to reconnect.
 */
#define _GNU_SOURCE /* pipe2, accept4, POLLRDHUP */
#include "transport/tcp/tcp_int.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "rm_log.h"
#include "rm_transports.h"
#include "transport/offer.h"
#include "rm_param.h"

#define RM__STASH_MAX 256

/* Socket buffers. -1 (auto, the default): a receive buffer of RCVBUF_AUTO
 * where net.core.rmem_max allows that much, the send buffer left to the
 * kernel's autotuning; 0: autotuning both ways; N > 0: N bytes both ways
 * (the kernel caps it at [rw]mem_max). Why (rm_bench, TCP loopback, the
 * 2-vCPU VM, 2026-12-05, ring): with autotuning both ways a 1 MiB
 * all-reduce of 2 ranks ran at 2.8-2.9 GB/s busbw in most runs (5.9 in
 * some): a new connection's windows start small and grow too slowly for
 * a communicator's life. A locked 4 MiB buffer on either side gave 5.8-5.9
 * in every run (4 MiB both ways cost 3-8% at 4 ranks and 64 MiB; the
 * receive side alone did not), and 16-64 MiB did not move. A buffer the
 * kernel caps small is worse than autotuning (256 KiB both ways: 1 MiB
 * 2.8, 16 MiB 1.84 against 2.2 GB/s), hence the rmem_max check. A locked
 * 4 MiB receive buffer (8 MiB with the kernel's doubling) bounds a
 * connection at about 4 MiB per round trip: 40 GB/s at 100 us. */
RM_PARAM(sockbuf, "RINGMASTER_TCP_SOCKBUF", -1)
#define RCVBUF_AUTO (4 << 20)

/* net.core.rmem_max (bytes), read once; 0 when unreadable */
static long rmem_max(void)
{
  static long cached = -1;
  long v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
  if (v < 0) {
    FILE *f = fopen("/proc/sys/net/core/rmem_max", "r");
    v = 0;
    if (f) {
      if (fscanf(f, "%ld", &v) != 1) v = 0;
      fclose(f);
    }
    __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
  }
  return v;
}

typedef struct stash_entry {
  int fd;
  rm__frame_t hello;
  unsigned char nonce[RM__AUTH_NONCE];
} stash_entry_t;

struct rm_endpoint {
  int fd;
  char address[NI_MAXHOST + NI_MAXSERV + 4];
  char offer[RM_TP_OFFER_MAX];   /* transport/offer.c */
  char nonce[RM__TP_NONCE_LEN + 1];
  void *tp_state[RM__TP_COUNT];  /* what transports' offer() kept */
  stash_entry_t stash[RM__STASH_MAX];
  int nstash;
};

int rm__tcp_set_opts(int fd)
{
  int one = 1;
  int64_t buf = rm__param_sockbuf();
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return -1;
  if (buf > 0) {
    int b = buf > INT_MAX ? INT_MAX : (int)buf;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  } else if (buf < 0 && rmem_max() >= RCVBUF_AUTO) {
    int b = RCVBUF_AUTO;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
  return 0;
}

int rm__tcp_resolve(const char *addr, struct sockaddr_storage *ss,
                    socklen_t *sslen, char *why, size_t whylen)
{
  char host[256], port_s[16];
  struct addrinfo hints, *res = NULL;
  int port, rc;

  if (rm__addr_split(addr, host, sizeof host, &port) != 0) {
    snprintf(why, whylen, "malformed address \"%s\" (want host:port)", addr);
    return -1;
  }
  snprintf(port_s, sizeof port_s, "%d", port);
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  rc = getaddrinfo(host, port_s, &hints, &res);
  if (rc != 0 || res == NULL) {
    snprintf(why, whylen, "cannot resolve \"%s\": %s", host, gai_strerror(rc));
    return -1;
  }
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *sslen = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static void format_addr(const struct sockaddr_storage *ss, char *out,
                        size_t outlen)
{
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo((const struct sockaddr *)ss, sizeof *ss, host, sizeof host,
                  serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    snprintf(out, outlen, "?:?");
    return;
  }
  if (ss->ss_family == AF_INET6)
    snprintf(out, outlen, "[%s]:%s", host, serv);
  else
    snprintf(out, outlen, "%s:%s", host, serv);
}

rm_status_t rm_endpoint_open(const char *bind_addr, rm_endpoint_t **out)
{
  rm_status_t st = RM_OK;
  struct sockaddr_storage ss;
  socklen_t sslen = sizeof ss;
  rm_endpoint_t *ep = NULL;
  char why[300];
  int one = 1;

  if (bind_addr == NULL || out == NULL) return RM_ERR_INVALID_ARG;
  if (rm__tcp_resolve(bind_addr, &ss, &sslen, why, sizeof why) != 0) {
    RM_ERROR("rm_endpoint_open: %s", why);
    return RM_ERR_INVALID_ARG;
  }
  ep = calloc(1, sizeof *ep);
  if (ep == NULL) return RM_ERR_NOMEM;
  ep->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ep->fd < 0) goto sys_fail;
  (void)setsockopt(ep->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(ep->fd, (struct sockaddr *)&ss, sslen) != 0) goto sys_fail;
  if (listen(ep->fd, 1024) != 0) goto sys_fail;
  sslen = sizeof ss;
  if (getsockname(ep->fd, (struct sockaddr *)&ss, &sslen) != 0) goto sys_fail;
  format_addr(&ss, ep->address, sizeof ep->address);
  {
    char host[NI_MAXHOST + 2];
    int port;
    if (rm__addr_split(ep->address, host, sizeof host, &port) != 0)
      snprintf(host, sizeof host, "127.0.0.1");
    rm__tp_build_offer(ep->offer, sizeof ep->offer, ep->nonce, host, ep->tp_state);
  }
  RM_DEBUG("endpoint listening on %s, offering \"%s\"", ep->address, ep->offer);
  *out = ep;
  return RM_OK;

sys_fail:
  RM_ERROR("rm_endpoint_open(%s): %s", bind_addr, strerror(errno));
  st = RM_ERR_SYSTEM;
  if (ep->fd >= 0) close(ep->fd);
  free(ep);
  return st;
}

const char *rm_endpoint_address(const rm_endpoint_t *ep)
{
  return ep ? ep->address : "";
}

const char *rm_endpoint_transports(const rm_endpoint_t *ep)
{
  return ep ? ep->offer : "";
}

void *rm__endpoint_tp_state(const rm_endpoint_t *ep, rm__tp_id_t id)
{
  return ep && id >= 0 && id < RM__TP_COUNT ? ep->tp_state[id] : NULL;
}

void rm_endpoint_close(rm_endpoint_t *ep)
{
  if (ep == NULL) return;
  rm__tp_close_offer(ep->tp_state);
  for (int i = 0; i < ep->nstash; i++) close(ep->stash[i].fd);
  if (ep->fd >= 0) close(ep->fd);
  free(ep);
}

int rm__endpoint_fd(const rm_endpoint_t *ep) { return ep ? ep->fd : -1; }

int rm__endpoint_stash(rm_endpoint_t *ep, int fd, const rm__frame_t *hello,
                       const unsigned char nonce[RM__AUTH_NONCE])
{
  if (ep->nstash == RM__STASH_MAX) {
    /* drop the oldest: a peer that moved on twice will reconnect */
    close(ep->stash[0].fd);
    memmove(ep->stash, ep->stash + 1, (RM__STASH_MAX - 1) * sizeof ep->stash[0]);
    ep->nstash--;
  }
  ep->stash[ep->nstash].fd = fd;
  ep->stash[ep->nstash].hello = *hello;
  memcpy(ep->stash[ep->nstash].nonce, nonce, RM__AUTH_NONCE);
  ep->nstash++;
  return 0;
}

int rm__endpoint_take(rm_endpoint_t *ep, uint64_t job, uint64_t gen,
                      rm__frame_t *hello, unsigned char nonce[RM__AUTH_NONCE])
{
  for (int i = 0; i < ep->nstash; i++) {
    stash_entry_t *e = &ep->stash[i];
    if (e->hello.job != job || e->hello.generation > gen) continue;
    int fd = e->fd;
    int match = e->hello.generation == gen;
    *hello = e->hello;
    memcpy(nonce, e->nonce, RM__AUTH_NONCE);
    memmove(e, e + 1, (size_t)(ep->nstash - i - 1) * sizeof *e);
    ep->nstash--;
    if (match) return fd;
    close(fd); /* older than the generation now forming: useless */
    i--;
  }
  return -1;
}
