/*
 * test_auto.c - the state machine of straggler_policy auto
 * (coordinator/straggler/auto.c), driven with explicit verdicts and
 * arrival times: on after M late of the last W and not before, off only at
 * <= M/3 (the windows survive a switch), the verdict rules of both modes,
 * the threshold, reset, and the config's ranges.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "auto.h"

#include "rm_testcheck.h"

/* One step in which only `slow` is late (-1: nobody). */
static rm_auto_event_t step(rm_auto_t *a, int world, int slow)
{
  uint8_t late[16] = {0};
  rm_auto_event_t ev;
  CHECK(world <= 16);
  if (slow >= 0) late[slow] = 1;
  rm_auto_observe(a, late, &ev);
  return ev;
}

/* W = 10, M = 6: rank 3 late in 5 of 10 stays synchronous, the 6th of the
 * last 10 turns deadline on (b = 0); off when every rank is late in <= 2. */
static void test_on_off_deadline(void)
{
  rm_auto_config_t cfg;
  rm_auto_t *a;
  rm_auto_event_t ev;
  rm_auto_config_init(&cfg, 4, 0);
  CHECK(cfg.window == 10 && cfg.min_late == 6);
  CHECK(rm_auto_create(&cfg, &a) == RM_OK);
  CHECK(rm_auto_mode(a) == RM_AUTO_SYNC);
  /* late, on time alternating: 5 of the last 10 at most, for 30 steps */
  for (int i = 0; i < 30; i++) {
    ev = step(a, 4, i % 2 ? 3 : -1);
    CHECK(ev.transition == RM_AUTO_SAME && rm_auto_mode(a) == RM_AUTO_SYNC);
  }
  /* steps 20..29: 5 late (the odd ones); one more late step: 6 of 10 */
  ev = step(a, 4, 3);
  CHECK(ev.transition == RM_AUTO_ON && ev.mode == RM_AUTO_DEADLINE);
  CHECK(ev.rank == 3 && ev.late == 6 && ev.of == 10);
  CHECK(rm_auto_mode(a) == RM_AUTO_DEADLINE);
  /* the window is kept: on time from now on, rank 3's count goes
   * 5, 5, 4, 4, 3, 3, 2: off at the 7th on-time step */
  int steps_to_off = 0;
  do {
    ev = step(a, 4, -1);
    steps_to_off++;
    CHECK(steps_to_off <= 10);
  } while (ev.transition == RM_AUTO_SAME);
  CHECK(ev.transition == RM_AUTO_OFF && ev.mode == RM_AUTO_SYNC && ev.late == 2);
  CHECK(ev.rank == -1 && ev.of == 10);
  CHECK(steps_to_off == 7); /* hysteresis: not off below M, only at M/3 */
  CHECK(rm_auto_mode(a) == RM_AUTO_SYNC);
  rm_auto_destroy(a);
}

/* b >= 1: mitigation is backup; M late in a row from a fresh start turns it
 * on at exactly the M-th step (counts over the steps observed). */
static void test_on_backup_fresh(void)
{
  rm_auto_config_t cfg;
  rm_auto_t *a;
  rm_auto_event_t ev;
  rm_auto_config_init(&cfg, 5, 1);
  CHECK(rm_auto_create(&cfg, &a) == RM_OK);
  for (int i = 0; i < 5; i++) CHECK(step(a, 5, 2).transition == RM_AUTO_SAME);
  ev = step(a, 5, 2);
  CHECK(ev.transition == RM_AUTO_ON && ev.mode == RM_AUTO_BACKUP && ev.rank == 2 &&
        ev.late == 6 && ev.of == 6);
  /* still late: stays on */
  for (int i = 0; i < 20; i++) CHECK(step(a, 5, 2).transition == RM_AUTO_SAME);
  CHECK(rm_auto_mode(a) == RM_AUTO_BACKUP);
  /* 3 of 10 late is not enough to turn off (M/3 = 2) */
  for (int i = 0; i < 30; i++) {
    ev = step(a, 5, i % 3 == 0 ? 2 : -1);
    CHECK(ev.transition == RM_AUTO_SAME);
  }
  CHECK(rm_auto_mode(a) == RM_AUTO_BACKUP);
  /* reset: a new generation starts synchronous with empty windows */
  rm_auto_reset(a);
  CHECK(rm_auto_mode(a) == RM_AUTO_SYNC);
  for (int i = 0; i < 5; i++) CHECK(step(a, 5, 2).transition == RM_AUTO_SAME);
  CHECK(step(a, 5, 2).transition == RM_AUTO_ON);
  rm_auto_destroy(a);
}

/* Two ranks each late in 5 of 10 never turn it on: the rule is per rank. */
static void test_per_rank(void)
{
  rm_auto_config_t cfg;
  rm_auto_t *a;
  rm_auto_config_init(&cfg, 4, 0);
  CHECK(rm_auto_create(&cfg, &a) == RM_OK);
  for (int i = 0; i < 40; i++) CHECK(step(a, 4, i % 2).transition == RM_AUTO_SAME);
  rm_auto_destroy(a);
}

/* Verdicts: synchronous by arrival time against the median, mitigating only
 * for ranks outside the mask that are also behind; a rank that never came
 * is late. */
static void test_verdicts(void)
{
  rm_auto_config_t cfg;
  rm_auto_t *a;
  uint8_t late[5], all[5] = {1, 1, 1, 1, 1};
  rm_auto_config_init(&cfg, 5, 1);
  CHECK(rm_auto_create(&cfg, &a) == RM_OK);
  /* median = 3rd arrival = 12; threshold 5: late iff > 17 */
  double t[5] = {10, 11, 12, 17, 17.5};
  rm_auto_verdicts(a, t, NULL, 5.0, late);
  CHECK(!late[0] && !late[1] && !late[2] && !late[3] && late[4]);
  rm_auto_verdicts(a, t, all, 5.0, late); /* a mask changes nothing here */
  CHECK(!late[3] && late[4]);
  /* even count: the lower median (2nd of 4 arrivals, 11) */
  double u[5] = {10, 11, 30, NAN, 16.5};
  rm_auto_verdicts(a, u, NULL, 5.0, late);
  CHECK(!late[0] && !late[1] && late[2] && late[3] && late[4]);
  /* mitigating (backup after 6 late steps): behind but a member is on time;
   * left out but within the threshold is on time; left out and behind is
   * late */
  for (int i = 0; i < 6; i++) step(a, 5, 4);
  CHECK(rm_auto_mode(a) == RM_AUTO_BACKUP);
  uint8_t mask[5] = {1, 1, 1, 0, 1};
  double v[5] = {10, 11, 12, 16, 40};
  rm_auto_verdicts(a, v, mask, 5.0, late);
  CHECK(!late[0] && !late[1] && !late[2] && !late[3] && !late[4]);
  uint8_t mask2[5] = {1, 1, 1, 1, 0};
  rm_auto_verdicts(a, v, mask2, 5.0, late);
  CHECK(!late[3] && late[4]);
  double w[5] = {10, 11, 12, 13, NAN};
  rm_auto_verdicts(a, w, mask2, 5.0, late);
  CHECK(late[4] && !late[3]);
  rm_auto_destroy(a);
}

static void test_threshold_and_config(void)
{
  rm_auto_config_t cfg;
  rm_auto_t *a;
  CHECK(rm_auto_threshold(20.0) == 10.0);
  CHECK(rm_auto_threshold(1.0) == 1.0); /* the 1 ms floor */
  CHECK(rm_auto_threshold(0.0) == 1.0);
  CHECK(isnan(rm_auto_threshold(NAN)));
  rm_auto_config_init(&cfg, 4, 0);
  cfg.window = 0;
  CHECK(rm_auto_create(&cfg, &a) == RM_ERR_INVALID_ARG);
  cfg.window = 65;
  CHECK(rm_auto_create(&cfg, &a) == RM_ERR_INVALID_ARG);
  cfg.window = 64;
  cfg.min_late = 65;
  CHECK(rm_auto_create(&cfg, &a) == RM_ERR_INVALID_ARG);
  cfg.min_late = 0;
  CHECK(rm_auto_create(&cfg, &a) == RM_ERR_INVALID_ARG);
  /* W = 64 keeps 64 verdicts */
  cfg.min_late = 64;
  CHECK(rm_auto_create(&cfg, &a) == RM_OK);
  for (int i = 0; i < 63; i++) CHECK(step(a, 4, 0).transition == RM_AUTO_SAME);
  CHECK(step(a, 4, 0).transition == RM_AUTO_ON);
  rm_auto_destroy(a);
  rm_auto_config_init(&cfg, 0, 0);
  CHECK(rm_auto_create(&cfg, &a) == RM_ERR_INVALID_ARG);
}

int main(void)
{
  test_on_off_deadline();
  test_on_backup_fresh();
  test_per_rank();
  test_verdicts();
  test_threshold_and_config();
  return rm_check_exit("test_auto");
}
