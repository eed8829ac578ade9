/*
 * rdma_ctl.c - the RDMA transport's control channels: the bootstrap TCP
 * socket of each pair, kept open after the handshake (frames: rdma_int.h).
 *
 *   BYE    the peer closed its communicator gracefully: the end of stream
 *          that follows is quiet; requests still pending to it get RM__RDMA_GRACE_MS
 *          to complete (their completions may be polled after the BYE was
 *          read: different threads of the peer / our device), then fail
 *          RM_ERR_PEER_LOST (rdma_progress.c pass());
 *   ABORT  the peer's sticky failure: adopted (rm__transport_adopt_abort);
 *   WAIT   "blocked on rank b-1 in collective a": kept for waits_on();
 *   end of stream without BYE: RM_ERR_PEER_LOST naming the peer, unless an
 *          ABORT waiting on another channel names the root cause first.
 * stalled() queues WAIT frames to the awaited rank and to the ranks that
 * said they wait on us (as TCP does); a frame that does not fit the small
 * output buffer is dropped (it is repeated every quarter deadline).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rm_clock.h"
#include "rm_le.h"
#include "transport/rdma/rdma_int.h"

/* ---- control channels ---- */

static rm_status_t on_frame(rm_comm_t *c, rm__rdma_conn_t *k)
{
  uint32_t type = rm__get_le32(k->ibuf + 4);
  uint64_t a = rm__get_le64(k->ibuf + 8), b = rm__get_le64(k->ibuf + 16);
  k->igot = 0;
  if (rm__get_le32(k->ibuf) != RM__RDMA_CTL_MAGIC)
    return rm__rdma_conn_fail(c, k->peer, RM_ERR_PROTOCOL, "bad frame on the control channel");
  if (rm__get_le64(k->ibuf + 24) != c->generation)
    return rm__rdma_conn_fail(c, k->peer, RM_ERR_STALE_GENERATION, "control frame of generation "
                     "%llu", (unsigned long long)rm__get_le64(k->ibuf + 24));
  switch (type) {
  case RM__RC_BYE: k->bye = 1; return RM_OK;
  case RM__RC_ABORT:
    return rm__transport_adopt_abort(c, k->peer, (rm_status_t)a,
                                     b >= 1 && b <= (uint64_t)c->world ? (int)(b - 1) : -1);
  case RM__RC_WAIT:
    k->waits_on = b >= 1 && b <= (uint64_t)c->world && (int)(b - 1) != k->peer ? (int)(b - 1) : -1;
    k->waits_seq = a;
    k->waits_ns = rm__now_ns();
    return RM_OK;
  case RM__RC_READY: return RM_OK;
  default:
    return rm__rdma_conn_fail(c, k->peer, RM_ERR_PROTOCOL, "unknown control frame type %u", type);
  }
}

/* Read what k's control socket holds. *eof = 1 on end of stream. */
static rm_status_t ctl_read(rm_comm_t *c, rm__rdma_conn_t *k, int *eof)
{
  rm_status_t st;
  *eof = 0;
  while (k->fd >= 0) {
    ssize_t n = recv(k->fd, k->ibuf + k->igot, (size_t)(RM__RDMA_CTL - k->igot), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return RM_OK;
    if (n <= 0) {
      *eof = 1;
      return RM_OK;
    }
    k->igot += (int)n;
    if (k->igot == RM__RDMA_CTL && (st = on_frame(c, k)) != RM_OK) return st;
  }
  return RM_OK;
}

static rm_status_t on_eof(rm_comm_t *c, struct rm__rdma_state *s, rm__rdma_conn_t *k)
{
  rm_status_t st;
  int eof;
  if (k->bye) {
    close(k->fd);
    k->fd = -1;
    k->rd_eof = 1;
    /* its last messages may complete here after its BYE arrived (the CQ
     * and the socket are read by different threads): judged in pass() */
    if (rm__rdma_pending(k)) k->left_ns = rm__now_ns();
    return RM_OK;
  }
  /* an ABORT waiting elsewhere names the root cause */
  for (int p = 0; p < c->world; p++)
    if (&s->conns[p] != k && s->conns[p].active &&
        (st = ctl_read(c, &s->conns[p], &eof)) != RM_OK)
      return st;
  return rm__rdma_conn_fail(c, k->peer, RM_ERR_PEER_LOST,
                   "control connection closed without goodbye (peer died?)");
}

/* ppoll() the control sockets, the wake pipe and, in a mixed communicator,
 * the poll bell (transport.c, "Waiting on several transports"; it rang:
 * drained, c->bell_rang = 1) for at most us. pfds has world + 1 entries:
 * this rank has no channel to itself, so the bell always fits. */
rm_status_t rm__rdma_ctl_poll(rm_comm_t *c, struct rm__rdma_state *s, int64_t us)
{
  int n = 1, r, first;
  char drain[64];
  s->pfds[0].fd = c->wake_fd[0];
  s->pfds[0].events = POLLIN;
  if (c->bell_on) {
    s->pfds[n].fd = c->bell_fd;
    s->pfds[n++].events = POLLIN;
  }
  first = n;
  for (int p = 0; p < c->world; p++) {
    if (!s->conns[p].active || s->conns[p].fd < 0) continue;
    s->pfds[n].fd = s->conns[p].fd;
    s->pfds[n].events = POLLIN;
    s->pfd_peer[n++] = p;
  }
  {
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    r = ppoll(s->pfds, (nfds_t)n, &ts, NULL);
  }
  if (r <= 0) return RM_OK;
  if (s->pfds[0].revents & POLLIN)
    while (read(c->wake_fd[0], drain, sizeof drain) > 0) {
    }
  if (first > 1 && (s->pfds[1].revents & POLLIN)) {
    while (recv(c->bell_fd, drain, sizeof drain, MSG_DONTWAIT) > 0) {
    }
    c->bell_rang = 1;
  }
  for (int i = first; i < n; i++) {
    rm__rdma_conn_t *k = &s->conns[s->pfd_peer[i]];
    rm_status_t st;
    int eof;
    if (s->pfds[i].revents == 0) continue;
    if ((st = ctl_read(c, k, &eof)) != RM_OK) return st;
    if (eof && (st = on_eof(c, s, k)) != RM_OK) return st;
  }
  return rm_comm_status(c);
}

void rm__rdma_stalled(rm_comm_t *c, int on, uint64_t seq, int64_t since_ns)
{
  struct rm__rdma_state *s = rm__rdma(c);
  if (s == NULL || s->closed) return;
  for (int p = 0; p < c->world; p++) {
    rm__rdma_conn_t *k = &s->conns[p];
    int cares = p == on || (k->waits_on == c->rank && k->waits_ns >= since_ns);
    if (cares && k->active && !k->bye && k->fd >= 0)
      rm__rdma_ctl_send(c, k, RM__RC_WAIT, seq, (uint64_t)on + 1);
  }
}

int rm__rdma_left(const rm_comm_t *c, int peer)
{
  const struct rm__rdma_state *s = rm__rdma(c);
  return s != NULL && peer >= 0 && peer < c->world && s->conns[peer].bye;
}

int rm__rdma_waits_on(const rm_comm_t *c, int peer, int64_t since_ns, uint64_t *seq)
{
  const struct rm__rdma_state *s = rm__rdma(c);
  const rm__rdma_conn_t *k;
  if (s == NULL || peer < 0 || peer >= c->world) return -1;
  k = &s->conns[peer];
  if (k->waits_on < 0 || k->waits_ns < since_ns) return -1;
  *seq = k->waits_seq;
  return k->waits_on;
}
