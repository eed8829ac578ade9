/*
 * rdma_dev.c - the RDMA transport's device side: the once-per-process probe
 * (available), the endpoint's offer (a TCP bootstrap listener), opening the
 * device per communicator, and memory registration. Formats and
 * invariants: rdma_int.h.
 *
 * Probe (pthread_once): load verbs (ibvwrap.c), list devices, take the
 * first (or RINGMASTER_RDMA_DEVICE) with an ACTIVE port, read GID index
 * RINGMASTER_RDMA_GID_INDEX (default 0) of it: <fabric> is its subnet
 * prefix in hex (RINGMASTER_RDMA_FABRIC overrides). The device is closed
 * again. Anything missing: one info line, available() = 0, TCP is used.
 *
 * Memory registration (reg_mr / dereg_mr of the ops table; the cache,
 * its limits and its caveat are the interface's: transport/mr.h). Ranges
 * are registered with LOCAL_WRITE | REMOTE_WRITE; read-only memory falls
 * back to local access, good for sends only (*writable = 0).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rm_log.h"
#include "rm_param.h"
#include "transport/rdma/rdma_int.h"

RM_PARAM(rdma_gid_index, "RINGMASTER_RDMA_GID_INDEX", 0)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static rm__rdma_probe_t g_probe;

typedef struct ep_state {
  int lfd;
} ep_state_t;

static int probe_device(struct ibv_device *d, const char *want)
{
  const char *name = rm__ibv_get_device_name(d);
  struct ibv_context *ctx;
  struct ibv_device_attr da;
  int found = 0;
  if (want && (name == NULL || strcmp(name, want) != 0)) return 0;
  if ((ctx = rm__ibv_open_device(d)) == NULL) return 0;
  if (rm__ibv_query_device(ctx, &da) == 0) {
    for (int p = 1; p <= da.phys_port_cnt && !found; p++) {
      struct ibv_port_attr pa;
      union ibv_gid gid;
      if (rm__ibv_query_port(ctx, (uint8_t)p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE)
        continue;
      if (rm__ibv_query_gid(ctx, (uint8_t)p, g_probe.gid_index, &gid) != 0) continue;
      snprintf(g_probe.dev, sizeof g_probe.dev, "%s", name ? name : "?");
      g_probe.port = (uint8_t)p;
      for (int i = 0; i < 8; i++)
        sprintf(g_probe.fabric + 2 * i, "%02x", gid.raw[i]);
      found = 1;
    }
  }
  rm__ibv_close_device(ctx);
  return found;
}

static void probe_once(void)
{
  char why[320] = "";
  struct ibv_device **list;
  const char *want = rm__env_str("RINGMASTER_RDMA_DEVICE", NULL);
  const char *fabric = rm__env_str("RINGMASTER_RDMA_FABRIC", NULL);
  int n = 0;

  g_probe.gid_index = (int)rm__param_rdma_gid_index();
  if (rm__ibv_load(why, sizeof why) != RM_OK) {
    RM_INFO("rdma: not used: cannot load verbs (%s)", why);
    return;
  }
  list = rm__ibv_get_device_list(&n);
  for (int i = 0; list && i < n && !g_probe.ok; i++) g_probe.ok = probe_device(list[i], want);
  if (list) rm__ibv_free_device_list(list);
  if (!g_probe.ok) {
    RM_INFO("rdma: not used: no device%s%s with an active port (%d device%s in %s)",
            want ? " named " : "", want ? want : "", n, n == 1 ? "" : "s",
            rm__ibv_lib_path());
    return;
  }
  if (fabric) {
    size_t k = 0;
    for (const char *p = fabric; *p && k + 1 < sizeof g_probe.fabric; p++)
      if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_')
        g_probe.fabric[k++] = *p;
    g_probe.fabric[k] = '\0';
  }
  RM_DEBUG("rdma: device %s port %u, fabric %s", g_probe.dev, g_probe.port, g_probe.fabric);
}

const rm__rdma_probe_t *rm__rdma_probe(void)
{
  pthread_once(&g_once, probe_once);
  return &g_probe;
}

int rm__rdma_available(void) { return rm__rdma_probe()->ok; }

static int is_ipv4(const char *h)
{
  struct in_addr a;
  return inet_pton(AF_INET, h, &a) == 1;
}

int rm__rdma_offer(const char *host, char *tok, size_t n, void **state)
{
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  ep_state_t *ep;
  int fd, w;
  if (!rm__rdma_available()) return 0;
  if (host == NULL || !is_ipv4(host)) {
    RM_INFO("rdma: not offered on endpoint host \"%s\": the bootstrap needs an "
            "IPv4 address", host ? host : "");
    return 0;
  }
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, host, &sa.sin_addr);
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 256) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
      (ep = calloc(1, sizeof *ep)) == NULL) {
    RM_INFO("rdma: not offered: bootstrap listener on %s: %s", host, strerror(errno));
    close(fd);
    return 0;
  }
  w = snprintf(tok, n, "rdma:%s/%s:%d", g_probe.fabric, host, (int)ntohs(sa.sin_port));
  if (w < 0 || (size_t)w >= n) {
    close(fd);
    free(ep);
    return 0;
  }
  ep->lfd = fd;
  *state = ep;
  return 1;
}

void rm__rdma_offer_close(void *state)
{
  ep_state_t *ep = state;
  if (ep == NULL) return;
  if (ep->lfd >= 0) close(ep->lfd);
  free(ep);
}

int rm__rdma_listen_fd(const rm_comm_t *c)
{
  ep_state_t *ep = rm__endpoint_tp_state(c->endpoint, RM__TP_RDMA);
  return ep ? ep->lfd : -1;
}

/* ---- per communicator ---- */

rm_status_t rm__rdma_dev_open(rm_comm_t *c, struct rm__rdma_state *s)
{
  const rm__rdma_probe_t *pr = rm__rdma_probe();
  struct ibv_device **list;
  size_t half;
  int n = 0;

  list = rm__ibv_get_device_list(&n);
  for (int i = 0; list && i < n && s->ctx == NULL; i++) {
    const char *name = rm__ibv_get_device_name(list[i]);
    if (name && strcmp(name, pr->dev) == 0) s->ctx = rm__ibv_open_device(list[i]);
  }
  if (list) rm__ibv_free_device_list(list);
  if (s->ctx == NULL) {
    RM_ERROR("rank %d: rdma: cannot open device %s: %s", c->rank, pr->dev, strerror(errno));
    return RM_ERR_SYSTEM;
  }
  if (rm__ibv_query_port(s->ctx, pr->port, &s->port) != 0 ||
      rm__ibv_query_gid(s->ctx, pr->port, pr->gid_index, &s->gid) != 0 ||
      (s->pd = rm__ibv_alloc_pd(s->ctx)) == NULL ||
      (s->cq = rm__ibv_create_cq(s->ctx, c->world * (RM__RDMA_RQ + RM__RDMA_SQ) + 64,
                                 NULL, NULL, 0)) == NULL) {
    RM_ERROR("rank %d: rdma: device %s port %u: cannot set up (port, gid, pd, "
             "cq): %s", c->rank, pr->dev, pr->port, strerror(errno));
    return RM_ERR_SYSTEM;
  }
  half = (size_t)c->world * RM__RDMA_SLOTS * RM__RDMA_REC;
  s->ctl_len = 2 * half;
  if (posix_memalign((void **)&s->ctl, 4096, s->ctl_len) != 0) {
    s->ctl = NULL;
    return RM_ERR_NOMEM;
  }
  memset(s->ctl, 0, s->ctl_len);
  s->ctl_mr = rm__ibv_reg_mr(s->pd, s->ctl, s->ctl_len,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (s->ctl_mr == NULL) {
    RM_ERROR("rank %d: rdma: cannot register %zu bytes of CTS rings: %s", c->rank,
             s->ctl_len, strerror(errno));
    return RM_ERR_SYSTEM;
  }
  for (int p = 0; p < c->world; p++) {
    s->conns[p].ring = s->ctl + (size_t)p * RM__RDMA_SLOTS * RM__RDMA_REC;
    s->conns[p].cts_out = s->ctl + half + (size_t)p * RM__RDMA_SLOTS * RM__RDMA_REC;
  }
  return RM_OK;
}

void rm__rdma_state_free(rm_comm_t *c)
{
  struct rm__rdma_state *s = rm__rdma(c);
  if (s == NULL) return;
  for (int p = 0; s->conns != NULL && p < c->world; p++) {
    rm__rdma_conn_t *k = &s->conns[p];
    if (k->qp) rm__ibv_destroy_qp(k->qp);
    if (k->fd >= 0) close(k->fd);
  }
  if (s->ctl_mr) rm__ibv_dereg_mr(s->ctl_mr);
  free(s->ctl);
  if (s->cq) rm__ibv_destroy_cq(s->cq);
  if (s->pd) rm__ibv_dealloc_pd(s->pd);
  if (s->ctx) rm__ibv_close_device(s->ctx);
  free(s->conns);
  free(s->pfds);
  free(s->pfd_peer);
  free(s);
  c->tstate[RM__TP_RDMA] = NULL;
}

/* ---- memory registration ---- */

rm_status_t rm__rdma_reg_mr(rm_comm_t *c, void *addr, size_t len, int need_write, void **mh,
                            int *writable)
{
  struct rm__rdma_state *s = rm__rdma(c);
  struct ibv_mr *mr;
  if (s == NULL || s->pd == NULL) {
    errno = ENODEV;
    return RM_ERR_UNSUPPORTED;
  }
  *writable = 1;
  mr = rm__ibv_reg_mr(s->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == NULL && !need_write) {
    *writable = 0; /* read-only memory: enough to send from */
    mr = rm__ibv_reg_mr(s->pd, addr, len, 0);
  }
  if (mr == NULL) return RM_ERR_SYSTEM;
  *mh = mr;
  return RM_OK;
}

void rm__rdma_dereg_mr(rm_comm_t *c, void *mh)
{
  (void)c;
  if (mh) rm__ibv_dereg_mr((struct ibv_mr *)mh);
}
