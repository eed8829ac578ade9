/*
 * rdma_qp.c - the RDMA transport's queue pairs and frames: QP creation and
 * the INIT -> RTR -> RTS transitions, the bootstrap HELLO (encode, check),
 * the peer's bootstrap address, and the control-frame helpers. Formats:
 * rdma_int.h; the handshake that uses them: rdma_connect.c.
 *
 * QP attributes: RC, one SGE, RM__RDMA_SQ send and RM__RDMA_RQ receive
 * WRs, remote write access; RTR with the smaller of the two ports' MTUs,
 * a GRH (dgid, GID index of the probe, hop limit 64) on Ethernet (RoCE) or
 * when the peer has no LID, min_rnr_timer 12 (0.64 ms); RTS with timeout
 * 14 (67 ms per try), retry_cnt 7, rnr_retry 7 (receive WRs are reposted
 * as soon as they complete, so an RNR wait is short), random 24-bit PSNs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rm_le.h"
#include "transport/rdma/rdma_int.h"

/* ---- control frames (shared with rdma_progress.c) ---- */

void rm__rdma_ctl_encode(const rm_comm_t *c, unsigned char *out, uint32_t type,
                         uint64_t a, uint64_t b)
{
  rm__put_le32(out, RM__RDMA_CTL_MAGIC);
  rm__put_le32(out + 4, type);
  rm__put_le64(out + 8, a);
  rm__put_le64(out + 16, b);
  rm__put_le64(out + 24, c->generation);
}

int rm__rdma_ctl_flush(rm__rdma_conn_t *k)
{
  while (k->olen > 0 && k->fd >= 0) {
    ssize_t w = send(k->fd, k->obuf, (size_t)k->olen, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (w < 0) {
      k->olen = 0; /* the peer is gone: its reader decides how (BYE or not) */
      return -1;
    }
    memmove(k->obuf, k->obuf + w, (size_t)(k->olen - (int)w));
    k->olen -= (int)w;
  }
  return 0;
}

void rm__rdma_ctl_send(rm_comm_t *c, rm__rdma_conn_t *k, uint32_t type,
                       uint64_t a, uint64_t b)
{
  if (k->fd < 0) return;
  if (k->olen + RM__RDMA_CTL > (int)sizeof k->obuf) {
    if (type == RM__RC_WAIT) return; /* repeated every quarter deadline */
    k->olen %= RM__RDMA_CTL;         /* BYE / ABORT displace queued WAITs
                                      * (a partly sent frame is kept) */
  }
  rm__rdma_ctl_encode(c, k->obuf + k->olen, type, a, b);
  k->olen += RM__RDMA_CTL;
  (void)rm__rdma_ctl_flush(k);
}

int rm__rdma_post_recv(rm__rdma_conn_t *k)
{
  struct ibv_recv_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = ((uint64_t)k->peer << 40) | ((uint64_t)RM__WR_RECV << 32);
  return rm__ibv_post_recv(k->qp, &wr, &bad);
}

void rm__rdma_qp_err(rm__rdma_conn_t *k)
{
  struct ibv_qp_attr a;
  if (k->qp == NULL) return;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_ERR;
  (void)rm__ibv_modify_qp(k->qp, &a, IBV_QP_STATE);
}

/* ---- QPs ---- */

int rm__rdma_qp_create(struct rm__rdma_state *s, rm__rdma_conn_t *k)
{
  struct ibv_qp_init_attr ia;
  struct ibv_qp_attr a;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = s->cq;
  ia.recv_cq = s->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = RM__RDMA_SQ;
  ia.cap.max_recv_wr = RM__RDMA_RQ;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  if ((k->qp = rm__ibv_create_qp(s->pd, &ia)) == NULL) return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = rm__rdma_probe()->port;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (rm__ibv_modify_qp(k->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       IBV_QP_ACCESS_FLAGS) != 0)
    return -1;
  for (int i = 0; i < RM__RDMA_RQ; i++)
    if (rm__rdma_post_recv(k) != 0) return -1;
  return 0;
}

void rm__rdma_hello_encode(const rm_comm_t *c, const rm__rdma_conn_t *k, uint32_t psn,
                           int reply, unsigned char *b)
{
  const struct rm__rdma_state *s = rm__rdma(c);
  memset(b, 0, RM__RDMA_HELLO);
  rm__put_le32(b, RM__RDMA_HELLO_MAGIC);
  b[4] = RM__RDMA_VERSION & 0xff;
  b[5] = RM__RDMA_VERSION >> 8;
  b[6] = (unsigned char)reply;
  rm__put_le64(b + 8, c->job_id);
  rm__put_le64(b + 16, c->generation);
  rm__put_le32(b + 24, (uint32_t)c->rank);
  rm__put_le32(b + 28, (uint32_t)c->world);
  rm__put_le32(b + 32, k->qp->qp_num);
  rm__put_le32(b + 36, psn);
  memcpy(b + 40, s->gid.raw, 16);
  b[56] = (unsigned char)(s->port.lid & 0xff);
  b[57] = (unsigned char)(s->port.lid >> 8);
  b[58] = (unsigned char)s->port.active_mtu;
  rm__put_le32(b + 60, RM__RDMA_SLOTS);
  rm__put_le64(b + 64, (uint64_t)(uintptr_t)k->ring);
  rm__put_le32(b + 72, s->ctl_mr->rkey);
}

/* Check a HELLO; NULL when good (*rank = its sender), else why. */
const char *rm__rdma_hello_check(const rm_comm_t *c, const unsigned char *b, int reply,
                                 int *rank)
{
  uint32_t r = rm__get_le32(b + 24), slots = rm__get_le32(b + 60);
  if (rm__get_le32(b) != RM__RDMA_HELLO_MAGIC) return "not an RDMA bootstrap HELLO";
  if ((b[4] | (b[5] << 8)) != RM__RDMA_VERSION) return "HELLO of another version";
  if (b[6] != reply) return reply ? "reply is not a reply" : "HELLO is a reply";
  if (rm__get_le64(b + 8) != c->job_id) return "HELLO for another job";
  if (rm__get_le64(b + 16) != c->generation) return "HELLO for another generation";
  if (rm__get_le32(b + 28) != (uint32_t)c->world) return "HELLO with another world size";
  if (r >= (uint32_t)c->world || c->conns[r].type != &rm__rdma_transport)
    return "HELLO from a rank that is not an RDMA peer";
  if (slots == 0 || slots > 65535) return "HELLO with a bad CTS slot count";
  *rank = (int)r;
  return NULL;
}

/* RESET..INIT done: INIT -> RTR -> RTS toward the peer of hello b. */
int rm__rdma_qp_connect(rm_comm_t *c, rm__rdma_conn_t *k, uint32_t psn, const unsigned char *b)
{
  struct rm__rdma_state *s = rm__rdma(c);
  const rm__rdma_probe_t *pr = rm__rdma_probe();
  struct ibv_qp_attr a;
  enum ibv_mtu mtu = (enum ibv_mtu)b[58];
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu < s->port.active_mtu ? mtu : s->port.active_mtu;
  a.dest_qp_num = rm__get_le32(b + 32);
  a.rq_psn = rm__get_le32(b + 36);
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = (uint16_t)(b[56] | (b[57] << 8));
  a.ah_attr.port_num = pr->port;
  if (s->port.link_layer == IBV_LINK_LAYER_ETHERNET || a.ah_attr.dlid == 0) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, b + 40, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)pr->gid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  if (rm__ibv_modify_qp(k->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;   /* 67 ms per try */
  a.retry_cnt = 7;
  a.rnr_retry = 7;  /* receive WRs are reposted promptly: wait for them */
  a.sq_psn = psn;
  a.max_rd_atomic = 1;
  if (rm__ibv_modify_qp(k->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                       IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return -1;
  k->rslots = rm__get_le32(b + 60);
  if (k->rslots > RM__RDMA_SLOTS) k->rslots = RM__RDMA_SLOTS;
  k->rring = rm__get_le64(b + 64);
  k->rring_rkey = rm__get_le32(b + 72);
  return 0;
}

/* The peer's bootstrap address from its offer: "rdma:<fabric>/<ip>:<port>";
 * an unspecified ip (0.0.0.0) means the host of its data address. */
int rm__rdma_peer_boot(const rm_comm_t *c, int p, struct sockaddr_in *sa)
{
  const char *o = c->offers[p], *t = o ? strstr(o, "rdma:") : NULL;
  char host[64], *colon;
  const char *slash;
  size_t n;
  if (t == NULL || (slash = strchr(t, '/')) == NULL) return -1;
  n = strcspn(slash + 1, " ");
  if (n >= sizeof host) return -1;
  memcpy(host, slash + 1, n);
  host[n] = '\0';
  if ((colon = strrchr(host, ':')) == NULL) return -1;
  *colon = '\0';
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) return -1;
  if (sa->sin_addr.s_addr == htonl(INADDR_ANY)) {
    char h2[64];
    snprintf(h2, sizeof h2, "%s", c->peers[p]);
    if ((colon = strrchr(h2, ':')) != NULL) *colon = '\0';
    if (inet_pton(AF_INET, h2, &sa->sin_addr) != 1) return -1;
  }
  return 0;
}
