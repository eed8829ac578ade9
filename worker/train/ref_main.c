/*
 * rm-train-ref - the single-process reference trainer (world = 1, no data
 * plane): the same `train` workload code, run with no communicator.
 *
 *   rm-train-ref [OPTIONS] [--every K] [--synthetic]
 *
 * OPTIONS is the workload's option string ("batch=64,steps=300,..."; see
 * train_workload.c). Prints a line every K steps (default 50), then the
 * summary JSON and the measured steps per second. --synthetic runs the
 * synthetic workload instead (no all-reduce in a single process).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_clock.h"
#include "train_int.h"

typedef struct ref_ctx {
  uint64_t every;
} ref_ctx_t;

static int print_step(void *ctx, const rm_step_report_t *r)
{
  const ref_ctx_t *c = ctx;
  if (c->every && r->step % c->every == 0)
    printf("step %6llu  loss %.4f  batch-acc %.3f  compute %.3f ms  "
           "checksum %016llx\n", (unsigned long long)r->step, r->loss,
           r->accuracy, r->compute_ms, (unsigned long long)r->param_checksum);
  return 0;
}

int main(int argc, char **argv)
{
  const char *options = "";
  const rm_workload_ops_t *ops = &rm__workload_train;
  ref_ctx_t ctx = {.every = 50};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--every") && i + 1 < argc) {
      ctx.every = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--synthetic")) {
      ops = &rm__workload_synthetic;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: %s [OPTIONS] [--every K] [--synthetic]\n",
              argv[0]);
      return 2;
    } else {
      options = argv[i];
    }
  }
  char err[512] = "", summary[1024] = "{}";
  void *state = NULL;
  rm_status_t st = ops->create(options, &state, err, sizeof(err));
  if (st != RM_OK) {
    fprintf(stderr, "rm-train-ref: %s (%s)\n", err, rm_status_name(st));
    return 1;
  }
  rm_workload_env_t env = {.rank = 0, .world = 1, .report = print_step,
                           .report_ctx = &ctx};
  int64_t t0 = rm__now_ns();
  st = ops->run(state, &env);
  double secs = (rm__now_ns() - t0) / 1e9;
  if (ops->summary) ops->summary(state, summary, sizeof(summary));
  printf("%s\n", summary);
  if (ops == &rm__workload_train) {
    uint64_t steps = rm__train_workload_trainer(state)->step;
    printf("%llu steps in %.3f s: %.0f steps/s\n", (unsigned long long)steps,
           secs, secs > 0 ? steps / secs : 0.0);
  }
  ops->destroy(state);
  if (st != RM_OK) fprintf(stderr, "rm-train-ref: %s\n", rm_status_name(st));
  return st == RM_OK ? 0 : 1;
}
