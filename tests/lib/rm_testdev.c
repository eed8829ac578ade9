/*
 * rm_testdev.c - device buffers for tests (rm_testdev.h) over the library's
 * runtime table (worker/device/gpu.h). Copies run on the runtime's default
 * stream and are waited for with an event, so they are synchronous for the
 * caller on both runtimes.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/gpu.h"
#include "rm_testdev.h"

int rm_test_gpu_available(char *why, size_t n)
{
  int fds[2], status = 0;
  char msg[200] = "";
  if (pipe(fds) != 0) {
    snprintf(why, n, "pipe failed");
    return 0;
  }
  pid_t pid = fork();
  if (pid == 0) {
    const rm__gpu_ops_t *g = rm__gpu();
    close(fds[0]);
    if (g == NULL) {
      snprintf(msg, sizeof msg, "no GPU runtime: no CUDA device, and RINGMASTER_TEST_GPU does "
                                "not name the tests' doubles (or the build has no test hooks)");
    } else {
      snprintf(msg, sizeof msg, "%s", g->name);
    }
    if (write(fds[1], msg, strlen(msg)) < 0) _exit(3);
    _exit(g == NULL ? 1 : 0);
  }
  close(fds[1]);
  ssize_t k = pid > 0 ? read(fds[0], msg, sizeof msg - 1) : -1;
  close(fds[0]);
  msg[k > 0 ? k : 0] = '\0';
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(why, n, "%s", msg[0] ? msg : "GPU probe failed");
    return 0;
  }
  snprintf(why, n, "%s", msg);
  return 1;
}

const char *rm_test_gpu_name(void)
{
  const rm__gpu_ops_t *g = rm__gpu();
  return g ? g->name : NULL;
}

void *rm_test_dev_alloc(size_t n)
{
  const rm__gpu_ops_t *g = rm__gpu();
  void *p = NULL;
  int prev;
  if (g == NULL || g->set_device(0, &prev) != RM_OK || g->dev_alloc(n, &p) != RM_OK) {
    fprintf(stderr, "rm_test_dev_alloc(%zu): %s\n", n, g ? g->err() : "no GPU runtime");
    return NULL;
  }
  return p;
}

void rm_test_dev_free(void *p)
{
  const rm__gpu_ops_t *g = rm__gpu();
  if (g && p) g->dev_free(p);
}

static int copy_sync(void *dst, const void *src, size_t n)
{
  const rm__gpu_ops_t *g = rm__gpu();
  void *ev = NULL;
  int q = -1;
  if (g == NULL) return -1;
  if (n == 0) return 0;
  if (g->copy(dst, src, n, NULL) == RM_OK && g->event_create(&ev) == RM_OK &&
      g->event_record(ev, NULL) == RM_OK) {
    while ((q = g->event_query(ev)) == 0) sched_yield();
  }
  if (ev) g->event_destroy(ev);
  if (q != 1) fprintf(stderr, "test device copy of %zu bytes failed: %s\n", n, g->err());
  return q == 1 ? 0 : -1;
}

int rm_test_dev_put(void *dev, const void *host, size_t n) { return copy_sync(dev, host, n); }
int rm_test_dev_get(void *host, const void *dev, size_t n) { return copy_sync(host, dev, n); }
