/*
 * shm_copy - what a shared-memory message costs to move on this host, by
 * the two ways the shm transport can move it (worker/transport/shm/):
 * process_vm_readv (single-copy read, RINGMASTER_SHM_CMA_MIN) against
 * memcpy (each of the ring's two copies). One process reads a forked
 * child's copy of the buffer; both buffers stay hot in cache, as the
 * ring's do. Prints size, then GB/s of each and their ratio, the median of
 * 5 timed passes of at least 256 MiB each. Not a test: it asserts nothing.
 *
 *   build/bench/shm_copy
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_BYTES (16u << 20)
#define PASSES 5

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* GB/s of `reps` moves of n bytes, median of PASSES; cma: from child */
static double rate(pid_t child, char *dst, char *src, size_t n, int reps, int cma)
{
  double r[PASSES];
  for (int p = 0; p < PASSES; p++) {
    double t0 = now_s();
    for (int k = 0; k < reps; k++) {
      if (cma) {
        struct iovec l = {dst, n}, rv = {src, n};
        if (process_vm_readv(child, &l, 1, &rv, 1, 0) != (ssize_t)n) return -1;
      } else {
        memcpy(dst, src, n);
        __asm__ volatile("" : : "r"(dst) : "memory");
      }
    }
    r[p] = (double)n * reps / (now_s() - t0) / 1e9;
  }
  qsort(r, PASSES, sizeof r[0], cmp_d);
  return r[PASSES / 2];
}

int main(void)
{
  static const size_t sizes[] = {4096, 65536, 262144, 1u << 20, 4u << 20, 16u << 20};
  char *src = malloc(MAX_BYTES), *dst = malloc(MAX_BYTES);
  pid_t child;
  if (!src || !dst) return 1;
  memset(src, 1, MAX_BYTES);
  memset(dst, 0, MAX_BYTES);
  child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    pause(); /* its copy of src is what the parent reads */
    _exit(0);
  }
  printf("%10s %14s %14s %8s\n", "bytes", "readv GB/s", "memcpy GB/s", "ratio");
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    int reps = (int)((256u << 20) / n);
    double cma = rate(child, dst, src, n, reps, 1), cpy = rate(child, dst, src, n, reps, 0);
    if (cma < 0) {
      printf("%10zu  process_vm_readv refused here (ptrace rules?)\n", n);
      break;
    }
    printf("%10zu %14.2f %14.2f %8.2f\n", n, cma, cpy, cma / cpy);
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return 0;
}
