/*
 * test_gate.c - the per-step participant gate of the straggler policies,
 * driven with explicit (deterministic) arrival times.
 */
#include <stdio.h>
#include <string.h>

#include "decide.h"

#include "rm_testcheck.h"

static rm_gate_state_t arrive(rm_gate_t *g, int rank, double t)
{
  rm_gate_state_t st = (rm_gate_state_t)-1;
  CHECK(rm_gate_arrive(g, rank, t, &st) == RM_OK);
  return st;
}

static void test_all(void)
{
  rm_gate_config_t cfg = {RM_GATE_ALL, 3, 0, 0, 0};
  rm_gate_t *g;
  int k = 0;
  CHECK(rm_gate_create(&cfg, &g) == RM_OK);
  CHECK(arrive(g, 2, 1) == RM_GATE_WAIT);
  CHECK(arrive(g, 2, 2) == RM_GATE_WAIT); /* duplicate */
  CHECK(arrive(g, 0, 3) == RM_GATE_WAIT);
  CHECK(rm_gate_members(g, NULL) == NULL);
  CHECK(arrive(g, 1, 500) == RM_GATE_DECIDED);
  CHECK(rm_gate_members(g, &k) != NULL && k == 3);
  CHECK(rm_gate_arrive(g, 3, 1, NULL) == RM_ERR_INVALID_ARG);
  rm_gate_destroy(g);
}

/* backup: 6 ranks, first 4 win; the other two are told LATE */
static void test_first_k(void)
{
  rm_gate_config_t cfg = {RM_GATE_FIRST_K, 6, 4, 0, 0};
  rm_gate_t *g;
  int k = 0;
  CHECK(rm_gate_create(&cfg, &g) == RM_OK);
  for (uint64_t step = 1; step <= 3; step++) {
    rm_gate_reset(g, step);
    CHECK(rm_gate_step(g) == step);
    int order[6] = {5, 1, 3, 0, 2, 4};
    for (int i = 0; i < 6; i++) {
      rm_gate_state_t st = arrive(g, order[(i + (int)step) % 6], 10.0 * i);
      CHECK(st == (i < 3 ? RM_GATE_WAIT : i == 3 ? RM_GATE_DECIDED : RM_GATE_LATE));
    }
    const uint8_t *m = rm_gate_members(g, &k);
    CHECK(m != NULL && k == 4);
    for (int i = 0; i < 6; i++)
      CHECK(m[order[(i + (int)step) % 6]] == (i < 4));
  }
  rm_gate_destroy(g);
  cfg.k = 7;
  CHECK(rm_gate_create(&cfg, &g) == RM_ERR_INVALID_ARG);
}

/* deadline: 5 ranks, median arrival = 3rd arrival at t=30, slack 20 */
static void test_deadline(void)
{
  rm_gate_config_t cfg = {RM_GATE_DEADLINE, 5, 0, 20.0, 0};
  rm_gate_t *g;
  rm_gate_state_t st;
  double wake = 0;
  int k = 0;
  CHECK(rm_gate_create(&cfg, &g) == RM_OK);
  rm_gate_reset(g, 1);
  CHECK(arrive(g, 4, 10) == RM_GATE_WAIT);
  CHECK(arrive(g, 0, 20) == RM_GATE_WAIT);
  rm_gate_poll(g, 1000, &st, &wake); /* no median yet: no deadline */
  CHECK(st == RM_GATE_WAIT && wake == -1.0);
  CHECK(arrive(g, 2, 30) == RM_GATE_WAIT);
  rm_gate_poll(g, 45, &st, &wake);
  CHECK(st == RM_GATE_WAIT && wake == 50.0);
  CHECK(arrive(g, 1, 49) == RM_GATE_WAIT); /* in time */
  rm_gate_poll(g, 50, &st, &wake);
  CHECK(st == RM_GATE_DECIDED && wake == -1.0);
  CHECK(arrive(g, 3, 51) == RM_GATE_LATE);
  const uint8_t *m = rm_gate_members(g, &k);
  CHECK(k == 4 && m[0] && m[1] && m[2] && !m[3] && m[4]);
  /* an arrival after an unpolled deadline is late too */
  rm_gate_reset(g, 2);
  arrive(g, 0, 0);
  arrive(g, 1, 0);
  arrive(g, 2, 5);
  CHECK(arrive(g, 3, 26) == RM_GATE_LATE);
  CHECK(rm_gate_members(g, &k) != NULL && k == 3);
  /* everyone in time: decided at the last arrival, no waiting */
  rm_gate_reset(g, 3);
  for (int r = 0; r < 5; r++)
    CHECK(arrive(g, r, r) == (r < 4 ? RM_GATE_WAIT : RM_GATE_DECIDED));
  CHECK(rm_gate_members(g, &k) != NULL && k == 5);
  rm_gate_destroy(g);
  /* even world: lower median (2nd of 4) */
  cfg.world = 4;
  CHECK(rm_gate_create(&cfg, &g) == RM_OK);
  arrive(g, 3, 0);
  arrive(g, 2, 100);
  rm_gate_poll(g, 100, &st, &wake);
  CHECK(st == RM_GATE_WAIT && wake == 120.0);
  rm_gate_poll(g, 120, &st, NULL);
  CHECK(st == RM_GATE_DECIDED && rm_gate_members(g, &k) != NULL && k == 2);
  rm_gate_destroy(g);
  cfg.slack_ms = -1;
  CHECK(rm_gate_create(&cfg, &g) == RM_ERR_INVALID_ARG);
}

/* coded: 6 ranks, s = 2 -> groups {0,1,2} {3,4,5}; decided as soon as both
 * groups have one arrival */
static void test_coded(void)
{
  rm_gate_config_t cfg = {RM_GATE_CODED, 6, 0, 0, 2};
  rm_gate_t *g;
  int k = 0;
  CHECK(rm_gate_create(&cfg, &g) == RM_OK);
  CHECK(arrive(g, 1, 1) == RM_GATE_WAIT);
  CHECK(arrive(g, 2, 2) == RM_GATE_WAIT); /* same group */
  CHECK(arrive(g, 5, 3) == RM_GATE_DECIDED);
  CHECK(arrive(g, 0, 4) == RM_GATE_LATE);
  const uint8_t *m = rm_gate_members(g, &k);
  CHECK(k == 3 && m[1] && m[2] && m[5] && !m[0]);
  rm_gate_destroy(g);
  cfg.s = 3; /* 4 does not divide 6 */
  CHECK(rm_gate_create(&cfg, &g) == RM_ERR_INVALID_ARG);
}

int main(void)
{
  test_all();
  test_first_k();
  test_deadline();
  test_coded();
  return rm_check_exit("test_gate");
}
