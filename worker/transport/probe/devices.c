/*
 * devices.c - the device list (transport/probe.h): joins the CUDA probe
 * (cuda_probe.c, built when RM_HAVE_CUDA) and the RDMA probe
 * (rdma_probe.c, built when RM_HAVE_RDMA). For a kind this build left
 * out, the probe here reports "not built" and zero devices.
 *
 * Discovery only: no RDMA or CUDA data path exists; TCP carries all traffic.
 */
#include "transport/probe.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rm_config.h"

void rm__devices_append(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
  va_list ap;
  size_t room;
  int n;
  if (len == 0 || *used >= len)
    return;
  room = len - *used;
  va_start(ap, fmt);
  n = vsnprintf(buf + *used, room, fmt, ap);
  va_end(ap);
  if (n < 0) {
    buf[*used] = '\0';
    return;
  }
  if ((size_t)n < room) {
    *used += (size_t)n;
    return;
  }
  /* truncated: mark it and refuse further appends */
  if (len >= 4)
    memcpy(buf + len - 4, "...", 4);
  *used = len;
}

#if !RM_HAVE_CUDA || !RM_HAVE_RDMA
static void set_why(char *why, size_t why_len, const char *text)
{
  if (why && why_len > 0)
    snprintf(why, why_len, "%s", text);
}
#endif

#if !RM_HAVE_CUDA
int rm__cuda_devices(char *buf, size_t len, char *why, size_t why_len)
{
  if (buf && len > 0)
    buf[0] = '\0';
  set_why(why, why_len, "not built (RINGMASTER_WITH_CUDA=OFF or no CUDA toolkit)");
  return 0;
}
#endif

#if !RM_HAVE_RDMA
int rm__rdma_devices(char *buf, size_t len, char *why, size_t why_len)
{
  if (buf && len > 0)
    buf[0] = '\0';
  set_why(why, why_len, "not built (RINGMASTER_WITH_RDMA=OFF or no libibverbs)");
  return 0;
}
#endif

int rm__devices_probe(char *buf, size_t len)
{
  char part[512];
  size_t used = 0;
  int n_cuda, n_rdma;
  if (!buf || len == 0)
    return 0;
  buf[0] = '\0';
  n_cuda = rm__cuda_devices(part, sizeof part, NULL, 0);
  if (n_cuda > 0)
    rm__devices_append(buf, len, &used, "%s", part);
  n_rdma = rm__rdma_devices(part, sizeof part, NULL, 0);
  if (n_rdma > 0)
    rm__devices_append(buf, len, &used, "%s%s", used ? "; " : "", part);
  if (n_cuda + n_rdma == 0)
    rm__devices_append(buf, len, &used, "none");
  return n_cuda + n_rdma;
}
