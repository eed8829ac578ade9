/*
 * test_hw_fallback.c - a build with the optional hardware parts (CUDA
 * runtime, libibverbs) still runs collectives normally, over shared memory
 * or TCP, on this machine - whether or not it has a GPU or an RDMA device
 * (those have no data path yet, so one of the two must carry every pair).
 *
 * Three real processes on 127.0.0.1 (tests/collectives' launcher). Each rank:
 *   1. probes devices (rm__devices_probe; with none it logs and says "none"),
 *   2. checks every peer pair got shared memory (one host: the default) or
 *      TCP (RINGMASTER_TRANSPORTS=tcp), never a device transport,
 *   3. runs rm_allreduce for f32 sum (count 2^16+3, every algorithm), i32 max
 *      and bf16 avg (count 1000) with inputs whose results are exact, and
 *      checks every element.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"
#include "rm_testlib.h"
#include "reduce/reduce.h"
#include "transport/probe.h"
#include "transport/transport.h"

#define WORLD 3
#define NBIG ((size_t)(1u << 16) + 3)
#define NSMALL 1000

static int check_transports(rm_comm_t *c)
{
  int bad = 0;
  for (int p = 0; p < rm_comm_world(c); p++) {
    if (p == rm_comm_rank(c))
      continue;
    const char *t = rm_comm_transport(c, p);
    if (t == NULL || (strcmp(t, "tcp") != 0 && strcmp(t, "shm") != 0)) {
      fprintf(stderr, "rank %d: peer %d carried by '%s', expected shm or tcp\n",
              rm_comm_rank(c), p, t ? t : "(none)");
      bad++;
    }
  }
  return bad;
}

static int f32_sum(rm_comm_t *c, rm_algo_t algo)
{
  int r = rm_comm_rank(c), bad = 0;
  float *buf = malloc(NBIG * sizeof *buf);
  rm_status_t st;
  if (!buf)
    return 1;
  for (size_t i = 0; i < NBIG; i++)
    buf[i] = (float)((i % 1024) + (size_t)r * 4096); /* exact in f32 */
  st = rm_allreduce_ex(c, buf, buf, NBIG, RM_F32, RM_SUM, algo, NULL);
  if (st != RM_OK) {
    fprintf(stderr, "rank %d: f32 sum %s: %s: %s\n", r, rm_algo_name(algo),
            rm_status_name(st), rm_comm_last_error(c));
    free(buf);
    return 1;
  }
  for (size_t i = 0; i < NBIG; i++) {
    float want = (float)(WORLD * (i % 1024) + 4096 * (WORLD * (WORLD - 1) / 2));
    if (buf[i] != want && bad++ == 0)
      fprintf(stderr, "rank %d: f32 sum %s [%zu] = %g, want %g\n", r, rm_algo_name(algo), i,
              buf[i], want);
  }
  free(buf);
  return bad != 0;
}

static int i32_max_bf16_avg(rm_comm_t *c)
{
  int r = rm_comm_rank(c), bad = 0;
  int32_t in[NSMALL], out[NSMALL];
  uint16_t h[NSMALL];
  for (int i = 0; i < NSMALL; i++) {
    in[i] = r == i % WORLD ? -i - 1 : i * 10 + r; /* one rank sends a negative */
    /* sum 9 * (i % 16) <= 135: every partial sum is an integer < 256, exact
     * in bf16's 8-bit significand; the mean is 3 * (i % 16) */
    h[i] = rm__f32_to_bf16((float)(3 * (i % 16) + r - 1));
  }
  if (rm_allreduce(c, in, out, NSMALL, RM_I32, RM_MAX) != RM_OK ||
      rm_allreduce(c, h, h, NSMALL, RM_BF16, RM_AVG) != RM_OK) {
    fprintf(stderr, "rank %d: %s\n", r, rm_comm_last_error(c));
    return 1;
  }
  for (int i = 0; i < NSMALL; i++) {
    int top = i % WORLD == WORLD - 1 ? WORLD - 2 : WORLD - 1; /* highest positive rank */
    int32_t want = i * 10 + top;
    if (out[i] != want && bad++ == 0)
      fprintf(stderr, "rank %d: i32 max [%d] = %d, want %d\n", r, i, out[i], want);
    if (rm__bf16_to_f32(h[i]) != (float)(3 * (i % 16)) && bad++ == 0)
      fprintf(stderr, "rank %d: bf16 avg [%d] = %g\n", r, i, rm__bf16_to_f32(h[i]));
  }
  return bad != 0;
}

static int rank_main(rm_comm_t *c, void *arg)
{
  char devs[256];
  int n = rm__devices_probe(devs, sizeof devs), bad = 0;
  (void)arg;
  if (rm_comm_rank(c) == 0)
    printf("devices: %s (%d); every pair over shm or tcp\n", devs, n);
  bad += check_transports(c);
  for (int a = RM_ALGO_RING; a < RM_ALGO_COUNT; a++)
    bad += f32_sum(c, (rm_algo_t)a);
  bad += i32_max_bf16_avg(c);
  return bad ? 1 : 0;
}

int main(void)
{
  int failed = rm_test_run(WORLD, rank_main, NULL, 60000);
  printf("%s: %d of %d ranks failed\n", failed ? "FAIL" : "PASS", failed, WORLD);
  return failed ? 1 : 0;
}
