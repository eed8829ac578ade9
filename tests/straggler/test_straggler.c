/*
 * test_straggler.c - straggler detection on synthetic, seeded report streams.
 *
 * Every stream is deterministic (splitmix64 noise with a fixed seed), so the
 * assertions are about the algorithm, never about timing. Defaults: W = 10,
 * M = 6, factor 1.5, MAD k 3, recover 1.2 x 5 reports.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "straggler.h"

#include "rm_testcheck.h"

static uint64_t rng_next(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
static double unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* base * (1 +- noise), uniform */
static double noisy(uint64_t *s, double base, double noise)
{
  return base * (1.0 + noise * (2.0 * unit(s) - 1.0));
}

typedef struct counts {
  int flagged, unflagged;
  uint64_t first_flag_step, first_unflag_step;
} counts_t;

/* feed one report; tally transitions of `watch` (and of everyone in all) */
static void feed(rm_straggler_t *d, uint64_t worker, uint64_t step,
                 double compute, counts_t *c)
{
  rm_straggler_report_t r = {worker, step, compute, 5.0, 10.0, 0.0};
  rm_straggler_event_t ev;
  rm_status_t st = rm_straggler_report(d, &r, &ev);
  CHECK(st == RM_OK);
  CHECK(ev.worker == worker);
  if (c == NULL) return;
  if (ev.transition == RM_STRAGGLER_FLAGGED) {
    if (c->flagged++ == 0) c->first_flag_step = step;
  } else if (ev.transition == RM_STRAGGLER_UNFLAGGED) {
    if (c->unflagged++ == 0) c->first_unflag_step = step;
  }
}

static void test_slow_worker_flagged(void)
{
  rm_straggler_config_t cfg;
  rm_straggler_t *d;
  counts_t c[8];
  uint64_t seed = 42;
  memset(c, 0, sizeof c);
  rm_straggler_config_init(&cfg);
  CHECK(rm_straggler_create(&cfg, &d) == RM_OK);
  for (uint64_t step = 1; step <= 40; step++)
    for (int w = 0; w < 8; w++)
      feed(d, (uint64_t)w, step, noisy(&seed, w == 3 ? 200.0 : 100.0, 0.05), &c[w]);
  CHECK(c[3].flagged == 1 && c[3].unflagged == 0);
  CHECK(c[3].first_flag_step >= 1 && c[3].first_flag_step <= (uint64_t)cfg.min_slow);
  for (int w = 0; w < 8; w++)
    if (w != 3) CHECK(c[w].flagged == 0);
  rm_straggler_info_t info;
  CHECK(rm_straggler_get(d, 3, &info) == RM_OK);
  CHECK(info.flagged == 1);
  CHECK(info.score > 1.7 && info.score < 2.3);
  CHECK(info.reports == 40);
  CHECK(info.wait_ms == 10.0 && info.comm_ms == 5.0);
  CHECK(rm_straggler_get(d, 0, &info) == RM_OK);
  CHECK(info.flagged == 0 && info.score > 0.9 && info.score < 1.1);
  CHECK(rm_straggler_flagged(d) == 1 && rm_straggler_workers(d) == 8);
  rm_straggler_info_t all[8];
  CHECK(rm_straggler_list(d, all, 8) == 8);
  for (int w = 0; w < 8; w++) CHECK(all[w].worker == (uint64_t)w && all[w].flagged == (w == 3));
  CHECK(rm_straggler_list(d, all, 2) == 2);
  rm_straggler_destroy(d);
}

/* 16 workers, +-30% noise and 2% of reports spiking 3x, 2000 steps: nobody
 * is ever flagged. Workers also have small persistent speed differences. */
static void test_noisy_normal_never_flagged(void)
{
  rm_straggler_t *d;
  counts_t all;
  uint64_t seed = 7;
  double base[16];
  memset(&all, 0, sizeof all);
  CHECK(rm_straggler_create(NULL, &d) == RM_OK);
  for (int w = 0; w < 16; w++) base[w] = noisy(&seed, 100.0, 0.15);
  for (uint64_t step = 1; step <= 2000; step++)
    for (int w = 0; w < 16; w++) {
      double x = noisy(&seed, base[w], 0.30);
      if (unit(&seed) < 0.02) x *= 3.0;
      feed(d, (uint64_t)w, step, x, &all);
    }
  CHECK(all.flagged == 0 && all.unflagged == 0);
  CHECK(rm_straggler_flagged(d) == 0);
  rm_straggler_destroy(d);
}

/* slow for steps 1..30, then normal: flagged once, unflagged once after
 * recover_steps fast reports, and not flagged again. */
static void test_recovery_unflags(void)
{
  rm_straggler_config_t cfg;
  rm_straggler_t *d;
  counts_t c;
  uint64_t seed = 3;
  memset(&c, 0, sizeof c);
  rm_straggler_config_init(&cfg);
  CHECK(rm_straggler_create(&cfg, &d) == RM_OK);
  for (uint64_t step = 1; step <= 200; step++)
    for (int w = 0; w < 6; w++) {
      double base = (w == 5 && step <= 30) ? 250.0 : 100.0;
      feed(d, (uint64_t)w, step, noisy(&seed, base, 0.05), w == 5 ? &c : NULL);
    }
  CHECK(c.flagged == 1 && c.unflagged == 1);
  CHECK(c.first_unflag_step == 30 + (uint64_t)cfg.recover_steps);
  CHECK(rm_straggler_flagged(d) == 0);
  rm_straggler_destroy(d);
}

/* Slow in 5 of every 10 steps (< M = 6): not flagged; in 7 of 10: flagged. */
static void test_intermittent(void)
{
  for (int slow_per_10 = 5; slow_per_10 <= 7; slow_per_10 += 2) {
    rm_straggler_t *d;
    counts_t c;
    uint64_t seed = 11;
    memset(&c, 0, sizeof c);
    CHECK(rm_straggler_create(NULL, &d) == RM_OK);
    for (uint64_t step = 1; step <= 100; step++)
      for (int w = 0; w < 5; w++) {
        int slow = w == 2 && (int)(step % 10) < slow_per_10;
        feed(d, (uint64_t)w, step, noisy(&seed, slow ? 300.0 : 100.0, 0.05),
             w == 2 ? &c : NULL);
      }
    if (slow_per_10 == 5) CHECK(c.flagged == 0);
    else CHECK(c.flagged >= 1);
    rm_straggler_destroy(d);
  }
}

/* Workers join and leave mid-stream; ids are sparse, not ranks. */
static void test_join_leave(void)
{
  rm_straggler_config_t cfg;
  rm_straggler_t *d;
  counts_t slow, others;
  uint64_t seed = 5;
  rm_straggler_event_t ev;
  uint64_t ids[6] = {100, 7, 42, 9000, 0, 0};
  int n = 4;
  memset(&slow, 0, sizeof slow);
  memset(&others, 0, sizeof others);
  rm_straggler_config_init(&cfg);
  CHECK(rm_straggler_create(&cfg, &d) == RM_OK);
  for (uint64_t step = 1; step <= 120; step++) {
    if (step == 30) ids[n++] = 555;      /* a slow worker joins */
    if (step == 40) ids[n++] = 12;       /* a normal worker joins */
    if (step == 70) {                    /* the slow one leaves */
      CHECK(rm_straggler_leave(d, 555, &ev) == RM_OK);
      CHECK(ev.transition == RM_STRAGGLER_UNFLAGGED && ev.worker == 555);
      CHECK(rm_straggler_flagged(d) == 0);
      ids[4] = ids[5];
      n--;
    }
    if (step == 90) {                    /* a normal one leaves */
      CHECK(rm_straggler_leave(d, 42, &ev) == RM_OK);
      CHECK(ev.transition == RM_STRAGGLER_NONE);
      ids[2] = ids[n - 1];
      n--;
    }
    for (int i = 0; i < n; i++) {
      int is_slow = ids[i] == 555;
      feed(d, ids[i], step, noisy(&seed, is_slow ? 220.0 : 100.0, 0.05),
           is_slow ? &slow : &others);
    }
  }
  CHECK(slow.flagged == 1);
  CHECK(slow.first_flag_step >= 30 && slow.first_flag_step < 30 + (uint64_t)cfg.min_slow);
  CHECK(others.flagged == 0);
  CHECK(rm_straggler_workers(d) == 4);
  CHECK(rm_straggler_leave(d, 555, &ev) == RM_ERR_NOT_FOUND);
  rm_straggler_info_t info;
  CHECK(rm_straggler_get(d, 555, &info) == RM_ERR_NOT_FOUND);
  CHECK(rm_straggler_get(d, 12, &info) == RM_OK && info.reports == 81);
  rm_straggler_destroy(d);
}

/* World 1: no peers, never flagged, score 1. World 2: the slower of two is
 * flagged (reference = the other), the faster never; equal ones neither. */
static void test_small_worlds(void)
{
  rm_straggler_t *d;
  counts_t c0, c1;
  uint64_t seed = 9;
  rm_straggler_info_t info;
  memset(&c0, 0, sizeof c0);
  CHECK(rm_straggler_create(NULL, &d) == RM_OK);
  for (uint64_t step = 1; step <= 50; step++)
    feed(d, 1, step, step > 10 ? 500.0 : 100.0, &c0);
  CHECK(c0.flagged == 0);
  CHECK(rm_straggler_get(d, 1, &info) == RM_OK && info.score == 1.0 && !info.flagged);
  rm_straggler_destroy(d);

  for (int slow = 0; slow <= 1; slow++) {
    memset(&c0, 0, sizeof c0);
    memset(&c1, 0, sizeof c1);
    CHECK(rm_straggler_create(NULL, &d) == RM_OK);
    for (uint64_t step = 1; step <= 50; step++) {
      feed(d, 1, step, noisy(&seed, 100.0, 0.1), &c0);
      feed(d, 2, step, noisy(&seed, slow ? 200.0 : 100.0, 0.1), &c1);
    }
    CHECK(c0.flagged == 0);
    CHECK(c1.flagged == slow);
    rm_straggler_destroy(d);
  }
}

/* Exactly half slow (n = 4: the MAD test rejects a bimodal population) and
 * a strict majority slow (3 of 5: the median is theirs) flag nobody, as
 * documented in straggler.c. */
static void test_majority_slow(void)
{
  for (int n = 4; n <= 5; n++) {
    rm_straggler_t *d;
    counts_t c[5];
    uint64_t seed = 13;
    memset(c, 0, sizeof c);
    CHECK(rm_straggler_create(NULL, &d) == RM_OK);
    int nslow = (n == 4) ? 2 : 3;
    for (uint64_t step = 1; step <= 40; step++)
      for (int w = 0; w < n; w++)
        feed(d, (uint64_t)w, step, noisy(&seed, w < nslow ? 200.0 : 100.0, 0.05), &c[w]);
    for (int w = 0; w < n; w++)
      CHECK(c[w].flagged == 0);
    rm_straggler_destroy(d);
  }
}

static void test_input_checks(void)
{
  rm_straggler_config_t cfg;
  rm_straggler_t *d = NULL;
  rm_straggler_event_t ev;
  char err[128] = "";
  rm_straggler_config_init(&cfg);
  cfg.window = 65;
  CHECK(rm_straggler_config_check(&cfg, err, sizeof err) == RM_ERR_INVALID_ARG);
  CHECK(strstr(err, "window") != NULL);
  CHECK(rm_straggler_create(&cfg, &d) == RM_ERR_INVALID_ARG && d == NULL);
  rm_straggler_config_init(&cfg);
  cfg.min_slow = 11;
  CHECK(rm_straggler_config_check(&cfg, err, sizeof err) == RM_ERR_INVALID_ARG);
  rm_straggler_config_init(&cfg);
  cfg.recover_factor = 2.0; /* above factor: no hysteresis */
  CHECK(rm_straggler_config_check(&cfg, err, sizeof err) == RM_ERR_INVALID_ARG);
  CHECK(strstr(err, "recover_factor") != NULL);
  rm_straggler_config_init(&cfg);
  cfg.window = 64; /* the full bit mask */
  cfg.min_slow = 64;
  CHECK(rm_straggler_create(&cfg, &d) == RM_OK);
  rm_straggler_report_t r = {1, 1, NAN, 0, 0, 0};
  CHECK(rm_straggler_report(d, &r, &ev) == RM_ERR_INVALID_ARG);
  r.compute_ms = -1.0;
  CHECK(rm_straggler_report(d, &r, &ev) == RM_ERR_INVALID_ARG);
  CHECK(rm_straggler_workers(d) == 0);
  /* duplicates of a step are ignored */
  r.compute_ms = 100.0;
  CHECK(rm_straggler_report(d, &r, &ev) == RM_OK);
  CHECK(rm_straggler_report(d, &r, &ev) == RM_OK && ev.transition == RM_STRAGGLER_NONE);
  rm_straggler_info_t info;
  CHECK(rm_straggler_get(d, 1, &info) == RM_OK && info.reports == 1);
  CHECK(info.step_ms == 100.0); /* step_ms 0 = compute + comm + wait */
  /* W = 64: a 2x worker among 3 is flagged after exactly 64 reports */
  counts_t c;
  memset(&c, 0, sizeof c);
  for (uint64_t step = 2; step <= 100; step++) {
    feed(d, 1, step, 100.0, NULL);
    feed(d, 2, step, 100.0, NULL);
    feed(d, 3, step, 200.0, &c);
  }
  CHECK(c.flagged == 1 && c.first_flag_step == 2 + 63);
  rm_straggler_destroy(d);
}

int main(void)
{
  test_slow_worker_flagged();
  test_noisy_normal_never_flagged();
  test_recovery_unflags();
  test_intermittent();
  test_join_leave();
  test_small_worlds();
  test_majority_slow();
  test_input_checks();
  return rm_check_exit("test_straggler");
}
