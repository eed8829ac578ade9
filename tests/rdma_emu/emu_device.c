/*
 * emu_device.c - TEST DOUBLE (see emu.h): the device, contexts, PDs, MRs
 * and CQs of librm_verbs_emu.so.
 *
 * Context lifecycle: ibv_open_device allocates the context, binds its
 * abstract listener (name from pid + context id, the GID's locator), makes
 * an eventfd to wake the progress thread and starts that thread with every
 * signal blocked. ibv_close_device stops and joins the thread and closes
 * every descriptor of the context (peers see EOF); objects the user did not
 * destroy are not freed (as in rdma-core, using them after close is a bug).
 *
 * PDs, MRs and CQs: emu_mem.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"

/* rdma-core's layout of the exported ibv_query_port's argument (verbs.h
 * only declares it): struct ibv_port_attr without port_cap_flags2. */
struct _compat_ibv_port_attr {
  enum ibv_port_state state;
  enum ibv_mtu max_mtu;
  enum ibv_mtu active_mtu;
  int gid_tbl_len;
  uint32_t port_cap_flags;
  uint32_t max_msg_sz;
  uint32_t bad_pkey_cntr;
  uint32_t qkey_viol_cntr;
  uint16_t pkey_tbl_len;
  uint16_t lid;
  uint16_t sm_lid;
  uint8_t lmc;
  uint8_t max_vl_num;
  uint8_t sm_sl;
  uint8_t subnet_timeout;
  uint8_t init_type_reply;
  uint8_t active_width;
  uint8_t active_speed;
  uint8_t phys_state;
  uint8_t link_layer;
  uint8_t flags;
};

static struct ibv_device emu_dev = {
  .node_type = IBV_NODE_CA,
  .transport_type = IBV_TRANSPORT_IB,
  .name = "emu0",
  .dev_name = "uverbs-emu0",
  .dev_path = "/nonexistent/rm-verbs-emu/emu0",
  .ibdev_path = "/nonexistent/rm-verbs-emu/emu0",
};
static uint16_t next_ctx_id; /* atomic */

void emu_trace(const char *fmt, ...)
{
  static int on = -1; /* atomic; racing first calls store the same */
  va_list ap;
  int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *e = getenv("RM_VERBS_EMU_TRACE");
    v = e && *e && strcmp(e, "0") != 0;
    __atomic_store_n(&on, v, __ATOMIC_RELAXED);
  }
  if (!v)
    return;
  va_start(ap, fmt);
  fprintf(stderr, "rm-verbs-emu[%d] ", (int)getpid());
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int64_t emu_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void emu_wake(struct emu_ctx *c)
{
  uint64_t one = 1;
  ssize_t n = write(c->wfd, &one, sizeof one);
  (void)n; /* EAGAIN: the counter is already non-zero, a wake is pending */
}

void emu_gid_make(union ibv_gid *gid, uint32_t pid, uint16_t id)
{
  memset(gid, 0, sizeof *gid);
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  gid->raw[8] = 'r';
  gid->raw[9] = 'm';
  for (int i = 0; i < 4; i++)
    gid->raw[10 + i] = (uint8_t)(pid >> (24 - 8 * i));
  gid->raw[14] = (uint8_t)(id >> 8);
  gid->raw[15] = (uint8_t)id;
}

int emu_gid_parse(const union ibv_gid *gid, uint32_t *pid, uint16_t *id)
{
  static const uint8_t prefix[10] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 'r', 'm'};
  if (memcmp(gid->raw, prefix, sizeof prefix) != 0)
    return -1;
  *pid = 0;
  for (int i = 0; i < 4; i++)
    *pid = (*pid << 8) | gid->raw[10 + i];
  *id = (uint16_t)((gid->raw[14] << 8) | gid->raw[15]);
  return 0;
}

void emu_sock_name(char *buf, size_t len, uint32_t pid, uint16_t id, size_t *addrlen)
{
  /* buf[0] = '\0': Linux abstract namespace; the length bounds the name */
  int n = snprintf(buf + 1, len - 1, "rm-verbs-emu.%08x.%04x", pid, id);
  buf[0] = '\0';
  *addrlen = offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n;
}

/* ---- device list ---- */
EMU_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
  const char *ndev = getenv("RM_VERBS_EMU_DEVICES");
  int n = (ndev && strcmp(ndev, "0") == 0) ? 0 : 1;
  struct ibv_device **list = calloc(2, sizeof *list);
  if (!list) {
    errno = ENOMEM;
    return NULL;
  }
  if (n)
    list[0] = &emu_dev;
  if (num_devices)
    *num_devices = n;
  return list;
}

EMU_EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EMU_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
  return device ? device->name : NULL;
}

static int req_notify_op(struct ibv_cq *cq, int solicited_only)
{
  return EOPNOTSUPP; /* completion channels are not emulated */
}

static int listen_on(struct emu_ctx *c)
{
  struct sockaddr_un sa;
  size_t alen;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  emu_sock_name(sa.sun_path, sizeof sa.sun_path, (uint32_t)getpid(), c->id, &alen);
  c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->lfd < 0)
    return -1;
  if (bind(c->lfd, (struct sockaddr *)&sa, (socklen_t)alen) != 0 || listen(c->lfd, 128) != 0)
    return -1;
  return 0;
}

EMU_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
  struct emu_ctx *c;
  sigset_t all, old;
  int err;
  if (device != &emu_dev) {
    errno = ENODEV;
    return NULL;
  }
  c = calloc(1, sizeof *c);
  if (!c) {
    errno = ENOMEM;
    return NULL;
  }
  c->lfd = c->wfd = -1;
  c->id = __atomic_fetch_add(&next_ctx_id, 1, __ATOMIC_RELAXED);
  emu_gid_make(&c->gid, (uint32_t)getpid(), c->id);
  c->ctx.device = device;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = -1;
  c->ctx.num_comp_vectors = 1;
  c->ctx.abi_compat = NULL; /* not an extended verbs_context */
  c->ctx.ops.poll_cq = emu_poll_cq;
  c->ctx.ops.req_notify_cq = req_notify_op;
  c->ctx.ops.post_send = emu_post_send;
  c->ctx.ops.post_recv = emu_post_recv;
  pthread_mutex_init(&c->ctx.mutex, NULL);
  pthread_mutex_init(&c->mu, NULL);
  if (listen_on(c) != 0)
    goto fail;
  c->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wfd < 0)
    goto fail;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  err = pthread_create(&c->thr, NULL, emu_progress_main, c);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err != 0) {
    errno = err;
    goto fail;
  }
  return &c->ctx;
fail:
  err = errno;
  if (c->lfd >= 0)
    close(c->lfd);
  if (c->wfd >= 0)
    close(c->wfd);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->ctx.mutex);
  free(c);
  errno = err;
  return NULL;
}

EMU_EXPORT int ibv_close_device(struct ibv_context *context)
{
  struct emu_ctx *c = EMU_CTX(context);
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_mutex_unlock(&c->mu);
  emu_wake(c);
  pthread_join(c->thr, NULL);
  for (struct emu_qp *q = c->qps; q; q = q->next)
    emu_channels_close(q);
  for (int i = 0; i < c->npend; i++)
    close(c->pend[i].fd);
  close(c->lfd);
  close(c->wfd);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->ctx.mutex);
  free(c);
  return 0;
}

EMU_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
  struct emu_ctx *c = EMU_CTX(context);
  memset(a, 0, sizeof *a);
  snprintf(a->fw_ver, sizeof a->fw_ver, "rm-verbs-emu (test double)");
  memcpy(&a->node_guid, c->gid.raw + 8, 8);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = 1ull << 40;
  a->page_size_cap = 4096;
  a->max_qp = 1 << 16;
  a->max_qp_wr = EMU_MAX_WR;
  a->max_sge = EMU_MAX_SGE;
  a->max_sge_rd = EMU_MAX_SGE;
  a->max_cq = 1 << 16;
  a->max_cqe = EMU_MAX_CQE;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->max_res_rd_atom = 16 << 16;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = 1;
  return 0;
}

/* Fills the compat prefix; the verbs.h inline zeroed the rest. */
#undef ibv_query_port
EMU_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                              struct _compat_ibv_port_attr *a)
{
  if (port_num != 1)
    return EINVAL;
  memset(a, 0, sizeof *a);
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->max_msg_sz = EMU_MAX_MSG;
  a->pkey_tbl_len = 1;
  a->max_vl_num = 1;
  a->active_width = 2;  /* 4X */
  a->active_speed = 32; /* EDR */
  a->phys_state = 5;    /* LinkUp */
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

EMU_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                             union ibv_gid *gid)
{
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *gid = EMU_CTX(context)->gid;
  return 0;
}

