/*
 * abort.c - what a rank makes of a peer's "I failed" (TCP's ABORT frame,
 * the shared-memory abort word): whom its own failure blames; and the one
 * wording of "the connection to peer P failed" that every transport uses
 * (rm__transport_conn_fail); and whether the host is oversubscribed, which
 * decides how every transport waits (rm__transport_oversubscribed). Kept
 * apart from transport.c so the frame fuzzer (fuzz/fuzz_frame.c) and the
 * TCP-only tests link it alone.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_int.h"
#include "transport/transport.h"

rm_status_t rm__transport_adopt_abort(rm_comm_t *c, int peer, rm_status_t st,
                                      int blamed)
{
  const char *addr = c->peers[peer];
  if (blamed < 0 || blamed >= c->world) blamed = -1;
  if (st == RM_ERR_RECONFIGURED || st == RM_ERR_JOB_ENDED)
    /* a session peer learned first that the coordinator moved on (the
     * generation changed or the job ended): nobody is to blame */
    return rm__comm_fail(c, st, -1, "peer rank %d (%s) learned first: %s",
                         peer, addr,
                         st == RM_ERR_JOB_ENDED ? "the job ended"
                                                : "the membership changed");
  if (blamed == c->rank && st == RM_ERR_TIMEOUT)
    /* the peer timed out waiting on us: it is alive (it just spoke), so it
     * is not what we lost; say so and name nobody (the coordinator's LINK
     * FAILURES rule, coordinator/core/recovery.c, decides) */
    return rm__comm_fail(c, st, -1, "peer rank %d (%s) timed out waiting on "
                         "this rank", peer, addr);
  if (st == RM_ERR_ABORTED || st == RM_OK || (unsigned)st > RM_ERR_INTERNAL ||
      blamed < 0 || blamed == c->rank) {
    /* the peer itself gave up (or blames us / nobody): it is what we lost */
    return rm__comm_fail(c, RM_ERR_PEER_LOST, peer,
                         "peer rank %d (%s): peer failed its communicator (%s)",
                         peer, addr, rm_status_name(st));
  }
  return rm__comm_fail(c, st, blamed,
                       "peer rank %d (%s) failed with %s blaming rank %d (%s)",
                       peer, addr, rm_status_name(st), blamed,
                       c->peers[blamed]);
}

rm_status_t rm__transport_conn_failv(rm_comm_t *c, int peer, rm_status_t st,
                                     const char *via, const char *fmt,
                                     va_list ap)
{
  char msg[300];
  vsnprintf(msg, sizeof msg, fmt, ap);
  return rm__comm_fail(c, st, peer, "peer rank %d (%s%s%s): %s", peer,
                       c->peers[peer], via ? ", " : "", via ? via : "", msg);
}

rm_status_t rm__transport_conn_fail(rm_comm_t *c, int peer, rm_status_t st,
                                    const char *via, const char *fmt, ...)
{
  va_list ap;
  rm_status_t r;
  va_start(ap, fmt);
  r = rm__transport_conn_failv(c, peer, st, via, fmt, ap);
  va_end(ap);
  return r;
}

int rm__transport_oversubscribed(const rm_comm_t *c)
{
  const char *me = c->peers[c->rank], *colon = strrchr(me, ':');
  size_t hl = colon ? (size_t)(colon - me) : strlen(me);
  int k = 0;
  for (int p = 0; p < c->world; p++)
    if (strncmp(c->peers[p], me, hl) == 0 &&
        (c->peers[p][hl] == ':' || c->peers[p][hl] == '\0'))
      k++;
  return k > sysconf(_SC_NPROCESSORS_ONLN);
}
