/*
 * shm_seg.c - the shared-memory transport's segments: creating this rank's
 * inbox, attaching to the peers' inboxes (connect_all), liveness, closing,
 * and sweeping segments that outlived their processes. Layout and words:
 * shm_int.h.
 *
 * connect_all, on every rank with shared-memory pairs (all run it before
 * the TCP handshake, transport.c), within c->connect_timeout_ms:
 *   1. sweep stale "/rm-*" segments (once per process);
 *   2. create the inbox (O_EXCL; an existing one of our own nonce is left
 *      from an earlier communicator of this endpoint and is replaced), size
 *      it, write the header, publish ready = 1;
 *   3. for each peer: open its inbox (it may not exist yet: retry every
 *      1-5 ms), wait for ready, check magic, version, job, generation,
 *      rank, world and that it has the slot we expect; probe CMA on it;
 *      publish cma_ok in our ring for it; attached += 1 on its header;
 *   4. wait until attached == our slot count, then unlink our name;
 *   5. the DEATH WATCH (shm_int.h): a pidfd per peer and the thread that
 *      polls them (none where pidfd_open fails: the 50 ms pid poll).
 * Before step 2 the rank opens its poll-bell socket (shm_int.h, "Waiting in
 * a mixed communicator"), bound to its abstract name when some pair of c
 * is not shared memory (this rank parks), unbound otherwise (it only sends
 * to its peers' bells); closed in rm__shm_state_free.
 * Failure at any step: RM_ERR_TIMEOUT (or PROTOCOL for a header that does
 * not match) naming the peer rank, its address and the segment; our inbox
 * is unlinked on the way out.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "rm_transports.h"
#include "transport/shm/shm_int.h"

/* Bytes of each ring (per direction and pair); at least 64 KiB. */
RM_PARAM(shm_ring, "RINGMASTER_SHM_RING", 1 << 20)

/* ---- helpers shared with shm_progress.c ---- */

void rm__shm_ring_bell(const struct rm__shm_state *s, const rm__shm_conn_t *k)
{
  rm__shm_hdr_t *h = k->phdr;
  __atomic_add_fetch(&h->bell, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&h->sleeping, __ATOMIC_SEQ_CST))
    syscall(SYS_futex, &h->bell, FUTEX_WAKE, 1, NULL, NULL, 0);
  /* parked: what we published before this fence is seen by its pass, or
   * we see polling = 1 here (it fences between the two as well) */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&h->polling, __ATOMIC_RELAXED) &&
      __atomic_exchange_n(&h->polling, 0, __ATOMIC_SEQ_CST) && s->bell_fd >= 0 &&
      k->bell_len > 0) {
    ssize_t w = sendto(s->bell_fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                       (const struct sockaddr *)&k->bell_addr, k->bell_len);
    (void)w; /* full (already being woken), or gone: the pid check decides */
  }
}

int rm__shm_pid_gone(pid_t pid)
{
  char path[64], buf[256];
  int fd;
  ssize_t n;
  if (pid <= 0) return 1;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  /* alive or a zombie (killed, not yet reaped by its parent) */
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* Whether the pair (a, b) is carried by shared memory: the pair rule on the
 * two offers (both ranks and every third rank compute the same). */
static int pair_is_shm(const rm_comm_t *c, int a, int b)
{
  int lo = a < b ? a : b, hi = a < b ? b : a;
  const char *t = rm_tp_pick(c->offers[lo], c->offers[hi]);
  return a != b && t != NULL && strcmp(t, "shm") == 0;
}

/* Slot of sender s in receiver r's inbox; *n = r's slot count. */
static int slot_of(const rm_comm_t *c, int r, int s, int *n)
{
  int slot = -1, k = 0;
  for (int q = 0; q < c->world; q++) {
    if (!pair_is_shm(c, r, q)) continue;
    if (q == s) slot = k;
    k++;
  }
  if (n) *n = k;
  return slot;
}

static size_t inbox_len(uint64_t ring_bytes, int nslots)
{
  return RM__SHM_HDR_BYTES + (size_t)nslots * (RM__SHM_RING_CTL + ring_bytes);
}

static rm__shm_ring_t *ring_at(void *map, uint64_t ring_bytes, int slot)
{
  return (rm__shm_ring_t *)((char *)map + RM__SHM_HDR_BYTES +
                            (size_t)slot * (RM__SHM_RING_CTL + ring_bytes));
}

static void seg_name(const rm_comm_t *c, int r, char *out, size_t n)
{
  char host[40] = "", nonce[40] = "";
  (void)rm_tp_offer_shm(c->offers[r], host, sizeof host, nonce, sizeof nonce);
  snprintf(out, n, "/rm-%s-%llu-%llu", nonce, (unsigned long long)c->job_id,
           (unsigned long long)c->generation);
}

/* The abstract address of rank r's poll bell: its inbox name without the
 * slash, plus ".bell" (shm_int.h). */
static void bell_addr(const rm_comm_t *c, int r, struct sockaddr_un *a,
                      socklen_t *len)
{
  char name[96];
  int n;
  seg_name(c, r, name, sizeof name);
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "%s.bell", name + 1);
  if (n < 0 || (size_t)n >= sizeof a->sun_path - 1) n = (int)sizeof a->sun_path - 2;
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Our bell socket: bound (we park) when some pair of c is not shared
 * memory. A failure only costs latency (the caller then sleeps in slices),
 * so it is a warning, not an error. */
static void open_bell(rm_comm_t *c, struct rm__shm_state *s)
{
  int mixed = 0;
  for (int p = 0; p < c->world; p++)
    if (p != c->rank && c->conns[p].type != &rm__shm_transport) mixed = 1;
  s->bell_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->bell_fd < 0) {
    RM_WARN("rank %d: shm: no poll-bell socket: %s", c->rank, strerror(errno));
    return;
  }
  if (!mixed) return;
  struct sockaddr_un a;
  socklen_t len;
  bell_addr(c, c->rank, &a, &len);
  if (bind(s->bell_fd, (const struct sockaddr *)&a, len) != 0) {
    RM_WARN("rank %d: shm: cannot bind the poll bell @%s: %s (shared-memory "
            "arrivals may wait up to 1 ms)", c->rank, a.sun_path + 1, strerror(errno));
    return;
  }
  s->parks = 1;
  c->bell_fd = s->bell_fd;
  c->bell_on = 1;
}

/* ---- stale segments ---- */

static void sweep_one(const char *name)
{
  char path[300];
  struct stat st;
  int fd, gone = 0;
  snprintf(path, sizeof path, "/%s", name);
  fd = shm_open(path, O_RDONLY, 0);
  if (fd < 0) return;
  if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(rm__shm_hdr_t)) {
    rm__shm_hdr_t *h = mmap(NULL, sizeof *h, PROT_READ, MAP_SHARED, fd, 0);
    if (h != MAP_FAILED) {
      if (h->magic == RM__SHM_MAGIC && __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE))
        gone = rm__shm_pid_gone(h->pid);
      else
        gone = time(NULL) - st.st_mtime > 60; /* its creator died at once */
      munmap(h, sizeof *h);
    }
  } else if (fstat(fd, &st) == 0) {
    gone = time(NULL) - st.st_mtime > 60;
  }
  close(fd);
  if (gone && shm_unlink(path) == 0)
    RM_INFO("shm: removed stale segment %s (its process is gone)", path);
}

void rm__shm_sweep(void)
{
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  if (d == NULL) return;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "rm-", 3) == 0) sweep_one(e->d_name);
  closedir(d);
}

static pthread_once_t g_sweep_once = PTHREAD_ONCE_INIT;

/* ---- death watch (shm_int.h) ---- */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture */
#endif

static void *watch_main(void *arg)
{
  rm_comm_t *c = arg;
  struct rm__shm_state *s = rm__shm(c);
  struct pollfd *fds = calloc((size_t)c->world + 1, sizeof *fds);
  int *of = calloc((size_t)c->world + 1, sizeof *of); /* fds[i] is peer of[i]'s */
  int n = 1, left = 0;
  if (fds == NULL || of == NULL) goto out;
  fds[0].fd = s->watch_stop[0];
  fds[0].events = POLLIN;
  for (int p = 0; p < c->world; p++)
    if (s->conns[p].pidfd >= 0) {
      fds[n].fd = s->conns[p].pidfd;
      fds[n].events = POLLIN;
      of[n++] = p;
      left++;
    }
  while (left > 0) {
    if (poll(fds, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      RM_WARN("rank %d: shm: death watch: poll: %s; the pid poll takes over", c->rank,
              strerror(errno));
      __atomic_store_n(&s->watch_on, 0, __ATOMIC_RELEASE);
      break;
    }
    if (fds[0].revents) break; /* stop */
    int died = 0;
    for (int i = 1; i < n; i++) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      __atomic_store_n(&s->conns[of[i]].gone, 1, __ATOMIC_RELEASE);
      fds[i].fd = -1; /* readable for good: poll it no more */
      left--;
      died = 1;
    }
    if (!died) continue;
    /* as an abort wakes the rank: a poll() blocker by wake_fd, a futex
     * sleeper by its bell */
    char b = 1;
    ssize_t w = write(c->wake_fd[1], &b, 1); /* full pipe: already awake */
    (void)w;
    __atomic_add_fetch(&s->hdr->bell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &s->hdr->bell, FUTEX_WAKE, 1, NULL, NULL, 0);
  }
out:
  free(fds);
  free(of);
  return NULL;
}

static void watch_stop(rm_comm_t *c, struct rm__shm_state *s)
{
  if (s->watch_started) {
    char b = 1;
    ssize_t w = write(s->watch_stop[1], &b, 1);
    (void)w;
    pthread_join(s->watch, NULL);
    s->watch_started = 0;
  }
  for (int i = 0; i < 2; i++)
    if (s->watch_stop[i] >= 0) close(s->watch_stop[i]);
  s->watch_stop[0] = s->watch_stop[1] = -1;
  for (int p = 0; s->conns != NULL && p < c->world; p++)
    if (s->conns[p].pidfd >= 0) {
      close(s->conns[p].pidfd);
      s->conns[p].pidfd = -1;
    }
}

static void watch_start(rm_comm_t *c, struct rm__shm_state *s)
{
  int n = 0, err = 0;
  for (int p = 0; p < c->world && !err; p++) {
    rm__shm_conn_t *k = &s->conns[p];
    if (!k->active) continue;
    k->pidfd = (int)syscall(SYS_pidfd_open, k->pid, 0);
    if (k->pidfd >= 0) {
      n++;
    } else if (errno == ESRCH) {
      __atomic_store_n(&k->gone, 1, __ATOMIC_RELEASE); /* died already */
    } else {
      err = errno;
    }
  }
  if (!err && n > 0 && pipe2(s->watch_stop, O_CLOEXEC) != 0) err = errno;
  if (!err && n > 0) {
    sigset_t all, old;
    sigfillset(&all); /* the process's signals stay with its own threads */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    s->watch_on = 1;
    err = pthread_create(&s->watch, NULL, watch_main, c);
    s->watch_started = !err;
    if (err) s->watch_on = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  if (err) {
    RM_DEBUG("rank %d: shm: no death watch (%s): a dead peer is found by its pid, "
             "polled every 50 ms", c->rank, strerror(err));
    watch_stop(c, s);
  }
}

/* ---- connect ---- */

static rm_status_t create_inbox(rm_comm_t *c, struct rm__shm_state *s)
{
  size_t len = inbox_len(s->ring_bytes, s->nslots);
  int fd = -1;
  seg_name(c, c->rank, s->name, sizeof s->name);
  for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
    fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
      RM_WARN("shm: replacing segment %s left by an earlier communicator", s->name);
      shm_unlink(s->name);
    } else if (fd < 0) {
      break;
    }
  }
  if (fd < 0) {
    RM_ERROR("rank %d: shm: cannot create %s: %s", c->rank, s->name, strerror(errno));
    s->name[0] = '\0';
    return RM_ERR_SYSTEM;
  }
  if (ftruncate(fd, (off_t)len) != 0 ||
      (s->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    RM_ERROR("rank %d: shm: cannot size or map %s (%zu bytes): %s", c->rank,
             s->name, len, strerror(errno));
    s->map = NULL;
    close(fd);
    return RM_ERR_SYSTEM;
  }
  close(fd);
  s->map_len = len;
  s->hdr = s->map;
  s->hdr->magic = RM__SHM_MAGIC;
  s->hdr->version = RM__SHM_VERSION;
  s->hdr->job = c->job_id;
  s->hdr->generation = c->generation;
  s->hdr->rank = c->rank;
  s->hdr->world = c->world;
  s->hdr->pid = (int32_t)getpid();
  s->hdr->nslots = (uint32_t)s->nslots;
  s->hdr->ring_bytes = s->ring_bytes;
  s->hdr->probe_addr = (uint64_t)(uintptr_t)&s->probe_word;
  s->probe_word = RM__SHM_MAGIC;
  s->hdr->waits_on = -1;
  s->hdr->abort_blame = -1;
  __atomic_store_n(&s->hdr->ready, 1, __ATOMIC_RELEASE);
  return RM_OK;
}

/* Try to attach to peer p's inbox once: 1 done, 0 not yet (why), <0 error. */
static int try_attach(rm_comm_t *c, struct rm__shm_state *s, int p, char *why,
                      size_t why_len)
{
  rm__shm_conn_t *k = &s->conns[p];
  char name[96];
  struct stat st;
  int fd, nslots, slot;
  rm__shm_hdr_t *h;

  seg_name(c, p, name, sizeof name);
  if (k->pmap == NULL) {
    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      snprintf(why, why_len, "its segment %s does not exist (%s)", name, strerror(errno));
      return 0;
    }
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < RM__SHM_HDR_BYTES) {
      snprintf(why, why_len, "its segment %s is not sized yet", name);
      close(fd);
      return 0;
    }
    k->pmap = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (k->pmap == MAP_FAILED) {
      k->pmap = NULL;
      snprintf(why, why_len, "cannot map %s: %s", name, strerror(errno));
      return -1;
    }
    k->pmap_len = (size_t)st.st_size;
  }
  h = k->pmap;
  if (!__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE)) {
    snprintf(why, why_len, "its segment %s is not initialised yet", name);
    return 0;
  }
  slot = slot_of(c, p, c->rank, &nslots);
  if (h->magic != RM__SHM_MAGIC || h->version != RM__SHM_VERSION ||
      h->job != c->job_id || h->generation != c->generation || h->rank != p ||
      h->world != c->world || (int)h->nslots != nslots || slot < 0 ||
      h->ring_bytes != s->ring_bytes ||
      k->pmap_len < inbox_len(h->ring_bytes, nslots)) {
    snprintf(why, why_len, "segment %s does not match (job %llu generation "
             "%llu rank %d world %d slots %u ring %llu; want job %llu generation "
             "%llu rank %d world %d slots %d ring %llu)", name,
             (unsigned long long)h->job, (unsigned long long)h->generation,
             h->rank, h->world, h->nslots, (unsigned long long)h->ring_bytes,
             (unsigned long long)c->job_id, (unsigned long long)c->generation,
             p, c->world, nslots, (unsigned long long)s->ring_bytes);
    return -1;
  }
  k->phdr = h;
  k->pid = h->pid;
  bell_addr(c, p, &k->bell_addr, &k->bell_len);
  k->out = ring_at(k->pmap, h->ring_bytes, slot);
  k->out_data = (unsigned char *)k->out + RM__SHM_RING_CTL;
  /* CMA probe: can this rank read the peer's memory? */
  {
    uint64_t got = 0;
    struct iovec l = {&got, sizeof got};
    struct iovec r = {(void *)(uintptr_t)h->probe_addr, sizeof got};
    ssize_t n = process_vm_readv(k->pid, &l, 1, &r, 1, 0);
    int ok = n == (ssize_t)sizeof got && got == RM__SHM_MAGIC;
    __atomic_store_n(&k->in->cma_ok, (uint32_t)ok, __ATOMIC_RELEASE);
    if (!ok)
      RM_DEBUG("rank %d: shm: no single-copy reads from rank %d (pid %d): %s",
               c->rank, p, (int)k->pid, n < 0 ? strerror(errno) : "probe mismatch");
  }
  __atomic_add_fetch(&h->attached, 1, __ATOMIC_SEQ_CST);
  rm__shm_ring_bell(s, k);
  return 1;
}

static void nap(int64_t *ns)
{
  struct timespec ts = {0, (long)*ns};
  nanosleep(&ts, NULL);
  if (*ns < 5000000) *ns *= 2;
}

static void unlink_inbox(struct rm__shm_state *s)
{
  if (!s->unlinked && s->name[0]) shm_unlink(s->name);
  s->unlinked = 1;
}

rm_status_t rm__shm_connect_all(rm_comm_t *c)
{
  struct rm__shm_state *s;
  int64_t deadline = rm__now_ns() + (int64_t)c->connect_timeout_ms * 1000000LL;
  int64_t backoff = 1000000;
  int missing = 0, slot = 0;
  char why[400] = "";
  rm_status_t st;

  pthread_once(&g_sweep_once, rm__shm_sweep);
  s = calloc(1, sizeof *s);
  if (s == NULL) return RM_ERR_NOMEM;
  c->tstate[RM__TP_SHM] = s;
  s->bell_fd = -1;
  s->watch_stop[0] = s->watch_stop[1] = -1;
  s->conns = calloc((size_t)c->world, sizeof *s->conns);
  if (s->conns == NULL) return RM_ERR_NOMEM;
  for (int p = 0; p < c->world; p++) s->conns[p].pidfd = -1;
  open_bell(c, s);
  s->ring_bytes = (uint64_t)rm__param_shm_ring();
  if (s->ring_bytes < 65536) s->ring_bytes = 65536;
  s->ring_bytes = (s->ring_bytes + 63) & ~(uint64_t)63;
  (void)slot_of(c, c->rank, -1, &s->nslots);
  if ((st = create_inbox(c, s)) != RM_OK) return st;
  for (int p = 0; p < c->world; p++) {
    rm__shm_conn_t *k = &s->conns[p];
    k->peer = p;
    if (!pair_is_shm(c, c->rank, p)) continue;
    k->active = 1;
    /* device memory by CUDA IPC when both offer it (shm_int.h) */
    k->ipc = rm_tp_cuda_ipc(c->offers[p < c->rank ? p : c->rank],
                            c->offers[p < c->rank ? c->rank : p]);
    k->in = ring_at(s->map, s->ring_bytes, slot++);
    k->in_data = (unsigned char *)k->in + RM__SHM_RING_CTL;
    missing++;
  }
  rm__shm_tune(c);
  while (missing > 0) {
    int blocked = -1;
    for (int p = 0; p < c->world; p++) {
      rm__shm_conn_t *k = &s->conns[p];
      if (!k->active || k->phdr != NULL) continue;
      int r = try_attach(c, s, p, why, sizeof why);
      if (r < 0) {
        RM_ERROR("rank %d: shm: peer rank %d (%s): %s", c->rank, p, c->peers[p], why);
        unlink_inbox(s);
        return RM_ERR_PROTOCOL;
      }
      if (r > 0) missing--;
      else if (blocked < 0) blocked = p;
    }
    if (missing == 0) break;
    if (rm__now_ns() >= deadline) {
      RM_ERROR("rank %d: job %llu generation %llu: no shared-memory connection "
               "to peer rank %d (%s) within %d ms: %s", c->rank,
               (unsigned long long)c->job_id, (unsigned long long)c->generation,
               blocked, c->peers[blocked], c->connect_timeout_ms, why);
      unlink_inbox(s);
      return RM_ERR_TIMEOUT;
    }
    nap(&backoff);
  }
  /* every peer mapped our inbox: its name can go */
  while (__atomic_load_n(&s->hdr->attached, __ATOMIC_ACQUIRE) < (uint32_t)s->nslots) {
    if (rm__now_ns() >= deadline) {
      RM_ERROR("rank %d: job %llu generation %llu: %u of %d shared-memory "
               "peers attached to this rank's segment %s within %d ms",
               c->rank, (unsigned long long)c->job_id,
               (unsigned long long)c->generation,
               __atomic_load_n(&s->hdr->attached, __ATOMIC_ACQUIRE),
               s->nslots, s->name, c->connect_timeout_ms);
      unlink_inbox(s);
      return RM_ERR_TIMEOUT;
    }
    nap(&backoff);
  }
  unlink_inbox(s);
  watch_start(c, s);
  return RM_OK;
}

void rm__shm_state_free(rm_comm_t *c)
{
  struct rm__shm_state *s = rm__shm(c);
  if (s == NULL) return;
  watch_stop(c, s); /* before the mappings and wake_fd it uses go */
  unlink_inbox(s);
  for (int p = 0; s->conns != NULL && p < c->world; p++) {
    rm__shm_ipc_unmap_all(&s->conns[p]);
    if (s->conns[p].pmap) munmap(s->conns[p].pmap, s->conns[p].pmap_len);
  }
  if (s->map) munmap(s->map, s->map_len);
  if (s->parks) c->bell_on = 0;
  if (s->bell_fd >= 0) close(s->bell_fd);
  free(s->conns);
  free(s);
  c->tstate[RM__TP_SHM] = NULL;
}
