/*
 * rdma_probe.c - RDMA device discovery through libibverbs (built only when
 * RM_HAVE_RDMA). See transport/probe.h.
 *
 * Not the transport (that is worker/transport/rdma/, which loads verbs with
 * dlopen): this file only lists what exists, for the agent's device report,
 * one entry per (device, port):
 *
 *   rdma:mlx5_0 port1 ACTIVE InfiniBand
 *
 * Steps: ibv_get_device_list -> for each device ibv_open_device ->
 * ibv_query_device (port count) -> ibv_query_port per port -> close. A
 * device that cannot be opened is listed as "rdma:NAME (cannot open: ...)"
 * and not counted. No device (or no kernel support, errno ENOSYS) gives 0
 * and one info log line per process.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "rm_log.h"
#include "transport/probe.h"

static int logged_none; /* atomic; one info line per process */

static void say_none(char *why, size_t why_len, const char *text)
{
  if (why && why_len > 0)
    snprintf(why, why_len, "%s", text);
  if (!__atomic_exchange_n(&logged_none, 1, __ATOMIC_RELAXED))
    RM_INFO("rdma: no RDMA device (%s); TCP carries all traffic", text);
}

static const char *link_name(uint8_t ll)
{
  switch (ll) {
  case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
  case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
  default: return "link?";
  }
}

/* List the ports of one device; returns how many were listed. */
static int list_ports(struct ibv_device *dev, char *buf, size_t len, size_t *used)
{
  struct ibv_context *ctx = ibv_open_device(dev);
  struct ibv_device_attr attr;
  const char *name = ibv_get_device_name(dev);
  int n = 0;
  if (!ctx) {
    rm__devices_append(buf, len, used, "%srdma:%s (cannot open: %s)",
                       *used ? "; " : "", name, strerror(errno));
    return 0;
  }
  if (ibv_query_device(ctx, &attr) != 0) {
    rm__devices_append(buf, len, used, "%srdma:%s (query failed)",
                       *used ? "; " : "", name);
    goto out;
  }
  for (int p = 1; p <= attr.phys_port_cnt; p++) {
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0)
      continue;
    rm__devices_append(buf, len, used, "%srdma:%s port%d %s %s",
                       *used ? "; " : "", name, p, ibv_port_state_str(pa.state),
                       link_name(pa.link_layer));
    n++;
  }
out:
  ibv_close_device(ctx);
  return n;
}

int rm__rdma_devices(char *buf, size_t len, char *why, size_t why_len)
{
  struct ibv_device **list;
  char text[160];
  size_t used = 0;
  int ndev = 0, n = 0;
  if (buf && len > 0)
    buf[0] = '\0';
  errno = 0;
  list = ibv_get_device_list(&ndev);
  if (!list) {
    snprintf(text, sizeof text, "ibv_get_device_list: %s",
             errno ? strerror(errno) : "failed");
    say_none(why, why_len, text);
    return 0;
  }
  for (int i = 0; i < ndev; i++)
    n += list_ports(list[i], buf, len, &used);
  ibv_free_device_list(list);
  if (n == 0) {
    snprintf(text, sizeof text, "%d device%s found, no usable port", ndev,
             ndev == 1 ? "" : "s");
    say_none(why, why_len, text);
  }
  return n;
}
