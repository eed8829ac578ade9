/*
 * tcp_tap.c - RINGMASTER_TEST_TAP=PREFIX: a wiretap on the receive side of
 * the TCP transport for the secure-aggregation privacy test
 * (tests/secagg/), the tap of the hook table of tests/doubles' shared
 * object (hooks.c; common/rm_testhook.h). The progress engine of a
 * test-hook build calls it once per completed DATA receive
 * (tcp_progress.c pop_recv), with the payload exactly as it came off the
 * wire (before any reduction touches it), never the 48-byte header.
 *
 * File: PREFIX.<pid>, opened O_APPEND at the first message the process
 * receives (a forked child looks again: another pid, another file). Without
 * the variable a message costs one atomic load. One record per message,
 * [u32 LE length][length bytes], written under a mutex, so records of
 * concurrent communicators in one process never interleave.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "doubles.h"

/* 0: not looked at yet in this process, 1: off, 2: on (tap_fd open).
 * A forked child starts again from 0 (tap_child). */
static _Atomic int tap_state;
static pthread_mutex_t tap_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tap_once = PTHREAD_ONCE_INIT;
static int tap_fd = -1;

static void tap_child(void)
{
  if (tap_fd >= 0) close(tap_fd); /* the parent's file: the child has its own */
  tap_fd = -1;
  pthread_mutex_init(&tap_mu, NULL);
  atomic_store(&tap_state, 0);
}

static void tap_register(void) { pthread_atfork(NULL, NULL, tap_child); }

static void tap_write(const void *buf, size_t len)
{
  unsigned char hdr[4];
  struct iovec iov[2];
  size_t total = 4 + len, done = 0;
  for (int i = 0; i < 4; i++) hdr[i] = (unsigned char)((uint32_t)len >> (8 * i));
  while (done < total) {
    int n = 0;
    if (done < 4) {
      iov[n].iov_base = hdr + done;
      iov[n++].iov_len = 4 - done;
    }
    size_t off = done > 4 ? done - 4 : 0;
    iov[n].iov_base = (char *)buf + off;
    iov[n++].iov_len = len - off;
    ssize_t w = writev(tap_fd, iov, n);
    if (w <= 0) { /* a test-only file: give up rather than spin */
      close(tap_fd);
      tap_fd = -1;
      atomic_store(&tap_state, 1);
      return;
    }
    done += (size_t)w;
  }
}

void rm__double_tap(const void *buf, size_t len)
{
  /* the common case in test builds: no tap, one atomic load per message */
  if (atomic_load_explicit(&tap_state, memory_order_acquire) == 1) return;
  if (len == 0 || len > UINT32_MAX) return;
  pthread_once(&tap_once, tap_register);
  pthread_mutex_lock(&tap_mu);
  if (atomic_load(&tap_state) == 0) {
    const char *prefix = getenv("RINGMASTER_TEST_TAP");
    if (prefix && *prefix) {
      char path[4096];
      snprintf(path, sizeof path, "%s.%d", prefix, (int)getpid());
      tap_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    }
    atomic_store(&tap_state, tap_fd >= 0 ? 2 : 1);
  }
  if (tap_fd >= 0) tap_write(buf, len);
  pthread_mutex_unlock(&tap_mu);
}
