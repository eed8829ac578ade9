/*
 * offer.c - what this process's endpoints offer (common/rm_transports.h),
 * the priority list, and the identity of "this host" for shared memory.
 *
 * Priority: RINGMASTER_TRANSPORTS, a comma list of names ("shm,rdma,tcp" when
 * unset). A name not known is a warning and skipped; an empty result falls
 * back to "tcp". The offer lists, in that order, each named transport that
 * is available() here; it is what the coordinator hands to every peer, and
 * the pair rule then picks from the two offers (so a rank whose list says
 * "tcp" makes every pair it is in TCP).
 *
 * Host identity (shm:<host>/...): two processes can share memory through
 * /dev/shm when they run under one kernel boot, see one /dev/shm and one
 * pid namespace (the shm transport checks a peer's liveness by pid). The
 * network namespace is part of it too: ranks in different namespaces are
 * treated as different hosts (that is how tests simulate hosts on one
 * machine). <host> is FNV-1a-64 over "boot_id|net ns|pid ns|ipc ns|dev:ino
 * of /dev/shm", 16 hex digits; RINGMASTER_HOST_ID overrides it.
 * <nonce> is 16 random hex digits per endpoint: the shm segments of a
 * communicator are named by the nonces of its ranks, so two jobs (or two
 * coordinators) on one host never collide.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/gpu.h"
#include "rm_log.h"
#include "rm_param.h"
#include "rm_transports.h"
#include "transport/offer.h"
#include "transport/transport.h"

/* Every transport this build has, by id (NULL: not built). */
static const rm__transport_ops_t *const g_all[RM__TP_COUNT] = {
    [RM__TP_SHM] = &rm__shm_transport,
#ifdef RM_HAVE_RDMA
    [RM__TP_RDMA] = &rm__rdma_transport,
#endif
    [RM__TP_TCP] = &rm__tcp_transport,
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_nprio;
static rm__tp_id_t g_prio[RM__TP_COUNT];
static char g_host[32];

const rm__transport_ops_t *rm__tp_by_name(const char *name)
{
  for (int i = 0; i < RM__TP_COUNT; i++)
    if (name && g_all[i] && strcmp(g_all[i]->name, name) == 0) return g_all[i];
  return NULL;
}

const rm__transport_ops_t *rm__tp_by_id(rm__tp_id_t id)
{
  return id >= 0 && id < RM__TP_COUNT ? g_all[id] : NULL;
}

static void add_prio(const char *name, size_t n)
{
  for (int i = 0; i < RM__TP_COUNT; i++) {
    if (!g_all[i] || strlen(g_all[i]->name) != n || strncmp(g_all[i]->name, name, n))
      continue;
    for (int k = 0; k < g_nprio; k++)
      if (g_prio[k] == g_all[i]->id) return;
    g_prio[g_nprio++] = g_all[i]->id;
    return;
  }
  RM_WARN("RINGMASTER_TRANSPORTS: unknown transport \"%.*s\" skipped "
          "(known: shm, rdma where built, tcp)", (int)n, name);
}

static void fnv(uint64_t *h, const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    *h ^= b[i];
    *h *= 0x100000001b3ULL;
  }
}

static void hash_link(uint64_t *h, const char *path)
{
  char buf[128];
  ssize_t n = readlink(path, buf, sizeof buf);
  if (n > 0) fnv(h, buf, (size_t)n);
  fnv(h, "|", 1);
}

static void load(void)
{
  const char *list = rm__env_str("RINGMASTER_TRANSPORTS", "shm,rdma,tcp");
  const char *p = list;
  while (*p) {
    size_t n = strcspn(p, ", ");
    if (n) add_prio(p, n);
    p += n;
    while (*p == ',' || *p == ' ') p++;
  }
  if (g_nprio == 0) {
    RM_WARN("RINGMASTER_TRANSPORTS=\"%s\" names no transport; using tcp", list);
    g_prio[g_nprio++] = RM__TP_TCP;
  }

  const char *forced = rm__env_str("RINGMASTER_HOST_ID", NULL);
  if (forced) {
    size_t k = 0;
    for (const char *s = forced; *s && k + 1 < sizeof g_host; s++)
      if ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-')
        g_host[k++] = *s;
    g_host[k] = '\0';
  }
  if (!g_host[0]) {
    uint64_t h = 0xcbf29ce484222325ULL;
    char boot[64] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0) {
      ssize_t n = read(fd, boot, sizeof boot - 1);
      if (n > 0) fnv(&h, boot, (size_t)n);
      close(fd);
    }
    fnv(&h, "|", 1);
    hash_link(&h, "/proc/self/ns/net");
    hash_link(&h, "/proc/self/ns/pid");
    hash_link(&h, "/proc/self/ns/ipc");
    if (stat("/dev/shm", &st) == 0) {
      fnv(&h, &st.st_dev, sizeof st.st_dev);
      fnv(&h, &st.st_ino, sizeof st.st_ino);
    }
    snprintf(g_host, sizeof g_host, "%016llx", (unsigned long long)h);
  }
}

int rm__tp_priority(rm__tp_id_t out[RM__TP_COUNT])
{
  pthread_once(&g_once, load);
  memcpy(out, g_prio, sizeof g_prio);
  return g_nprio;
}

const char *rm__tp_host_id(void)
{
  pthread_once(&g_once, load);
  return g_host;
}

void rm__tp_build_offer(char *out, size_t n, char nonce[RM__TP_NONCE_LEN + 1],
                        const char *host, void *state[RM__TP_COUNT])
{
  rm__tp_id_t prio[RM__TP_COUNT];
  int np = rm__tp_priority(prio);
  unsigned char r[RM__TP_NONCE_LEN / 2];
  size_t k = 0;

  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
    uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)out;
    memcpy(r, &x, sizeof r < sizeof x ? sizeof r : sizeof x);
  }
  for (size_t i = 0; i < sizeof r; i++) sprintf(nonce + 2 * i, "%02x", r[i]);
  out[0] = '\0';
  for (int i = 0; i < np; i++) {
    const rm__transport_ops_t *t = g_all[prio[i]];
    int w;
    char tok[RM_TP_OFFER_MAX];
    if (!t->available()) continue;
    if (t->offer) {
      if (!t->offer(host, tok, sizeof tok, &state[t->id])) continue;
      w = snprintf(out + k, n - k, "%s%s", k ? " " : "", tok);
    } else if (t->id == RM__TP_SHM) {
      /* with the capability to move device memory by CUDA IPC between
       * ranks of this host (rm_transports.h; decided without touching the
       * GPU: device/gpu.c) */
      const char *h = rm__tp_host_id();
      if (rm__gpu_ipc_offerable())
        w = snprintf(out + k, n - k, "%sshm:%s/%s cuda:%s/ipc1", k ? " " : "", h, nonce, h);
      else
        w = snprintf(out + k, n - k, "%sshm:%s/%s", k ? " " : "", h, nonce);
    } else
      w = snprintf(out + k, n - k, "%s%s", k ? " " : "", t->name);
    if (w < 0 || (size_t)w >= n - k) {
      out[k] = '\0';
      break;
    }
    k += (size_t)w;
  }
  if (k == 0) snprintf(out, n, "tcp");
}

void rm__tp_close_offer(void *state[RM__TP_COUNT])
{
  for (int i = 0; i < RM__TP_COUNT; i++)
    if (state[i] && g_all[i] && g_all[i]->offer_close) {
      g_all[i]->offer_close(state[i]);
      state[i] = NULL;
    }
}
