/*
 * emu_progress.c - TEST DOUBLE (see emu.h): the progress thread of a
 * context, which plays the HCA.
 *
 * Loop: under ctx->mu build a pollfd set (wake eventfd, listener, parked
 * connections, each QP's request channel and, when attached, the peer's
 * channel into it); drop the lock for poll(); take it again and service
 * everything with non-blocking I/O (emu_pend_service, emu_in_service,
 * emu_out_service), at most EMU_BUDGET bytes per channel per turn so user
 * threads get the lock in between. poll() ticks every TICK_MS while a
 * timer runs (ack timeout, RNR wait, connect retry) and returns at once
 * when a dead channel has WRs to fail; otherwise it sleeps until an fd or
 * the wake eventfd (every post, modify and destroy writes it) fires.
 * Revents are only used for hang-ups of fds not being read; everything
 * else is just tried (EAGAIN is cheap), so a stale index never matters.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "emu.h"

#define TICK_MS 5

static int build(struct emu_ctx *c, struct pollfd **pfd, size_t *cap, int *tick)
{
  size_t need = 2 + (size_t)c->npend, n = 0;
  for (struct emu_qp *q = c->qps; q; q = q->next)
    need += 2;
  if (need > *cap) {
    struct pollfd *p = realloc(*pfd, need * sizeof *p);
    if (!p)
      return -1;
    *pfd = p;
    *cap = need;
  }
  *tick = 0;
  (*pfd)[n++] = (struct pollfd){c->wfd, POLLIN, 0};
  (*pfd)[n++] = (struct pollfd){c->lfd, POLLIN, 0};
  for (int i = 0; i < c->npend; i++) {
    short ev = c->pend[i].got < sizeof c->pend[i].h ? POLLIN : 0; /* then hang-ups only */
    c->pend[i].pidx = (int)n;
    (*pfd)[n++] = (struct pollfd){c->pend[i].fd, ev, 0};
  }
  for (struct emu_qp *q = c->qps; q; q = q->next) {
    struct emu_out *o = &q->out;
    struct emu_in *in = &q->in;
    o->pidx = in->pidx = -1;
    if (q->qp.state == IBV_QPS_RTS) {
      int outstanding = q->sq_head != q->sq_tail;
      if (o->state == OUT_CONNECTING || outstanding)
        *tick = 1;
      if (o->state == OUT_DEAD && outstanding)
        *tick = -1; /* fail them now */
      if (o->state == OUT_UP) {
        int wr = o->hello_done < sizeof o->hello ||
                 (q->sq_sent != q->sq_tail && !q->sq[q->sq_sent % q->cap.max_send_wr].loc_err);
        o->pidx = (int)n;
        (*pfd)[n++] = (struct pollfd){o->fd, (short)(POLLIN | (wr ? POLLOUT : 0)), 0};
      }
    }
    if (in->fd >= 0 && (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS)) {
      int rd = in->phase != IN_RNR && in->olen + 2 * sizeof(struct emu_ack) <= sizeof in->obuf;
      if (in->phase == IN_RNR)
        *tick = *tick < 0 ? -1 : 1;
      in->pidx = (int)n;
      (*pfd)[n++] = (struct pollfd){in->fd, (short)((rd ? POLLIN : 0) | (in->olen ? POLLOUT : 0)),
                                    0};
    }
  }
  return (int)n;
}

void *emu_progress_main(void *arg)
{
  struct emu_ctx *c = arg;
  struct pollfd *pfd = NULL;
  size_t cap = 0;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    int tick, n = build(c, &pfd, &cap, &tick);
    uint64_t v;
    pthread_mutex_unlock(&c->mu);
    if (n < 0) {
      usleep(TICK_MS * 1000); /* out of memory for the poll set: retry */
      pthread_mutex_lock(&c->mu);
      continue;
    }
    (void)poll(pfd, (nfds_t)n, tick < 0 ? 0 : tick ? TICK_MS : -1);
    pthread_mutex_lock(&c->mu);
    if (c->stop)
      break;
    if (read(c->wfd, &v, sizeof v) < 0 && !emu_again())
      break;
    emu_pend_service(c, pfd);
    for (struct emu_qp *q = c->qps; q; q = q->next) {
      emu_in_service(q, q->in.pidx >= 0 ? pfd[q->in.pidx].revents : 0);
      emu_out_service(q);
    }
  }
  pthread_mutex_unlock(&c->mu);
  free(pfd);
  return NULL;
}
