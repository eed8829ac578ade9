/*
 * decide.c - per-step participant decision for the straggler policies.
 *
 * STATE MACHINE (one step; rm_gate_reset starts the next):
 *
 *   WAIT --arrive / poll, rule of the policy holds--> DECIDED
 *   DECIDED --arrive of a rank that is not a member--> (reply LATE)
 *
 *   rule of the policy, checked by decide_if_ready() after every arrival
 *   and every poll:
 *     ALL       arrived == world
 *     FIRST_K   arrived == k            (members: the first k, in order)
 *     DEADLINE  arrived == world, or now >= deadline where
 *                 t_med    = time of the ceil(world/2)-th arrival
 *                            (the median arrival, lower for even world)
 *                 deadline = t_med + slack_ms
 *               Before half the ranks arrived there is no deadline: a rank
 *               that never reports is a LOST worker, which heartbeats and
 *               the data plane detect; the gate does not guess.
 *     CODED     every group j (ranks j(s+1) .. j(s+1)+s) has an arrival: the
 *               fractional repetition code can then decode exactly
 *               (gradcode.c), so waiting longer buys nothing. Members = the
 *               arrived set; each worker derives the 0/1 plan from it with
 *               rm__gradcode_decode_plan (lowest arrived rank per group).
 *
 * INVARIANTS.
 *  1. members is fixed once decided and is a subset of the ranks that had
 *     arrived at that moment; count == popcount(members) >= 1.
 *  2. DEADLINE: members always include the first ceil(world/2) arrivals,
 *     so at least half the ranks contribute (the rescaling in
 *     aggregate.h divides by that count).
 *  3. No allocation after rm_gate_create.
 *
 * RESCALING: the gate only fixes the set; how its gradients are combined
 * (average over the k contributors for backup/deadline, 0/1 decode sum for
 * coded) is documented in worker/aggregate/aggregate.h and gradcode.c.
 */
#include "decide.h"

#include <stdlib.h>
#include <string.h>

#include "rm_alloc.h"

struct rm_gate {
  rm_gate_config_t cfg;
  uint64_t step;
  uint8_t *arrived; /* world bytes */
  uint8_t *members; /* world bytes, valid when decided */
  int *group_hits;  /* CODED: arrivals per group */
  int n_arrived, groups_hit, n_members;
  int decided;
  double t_med; /* DEADLINE: median arrival time, < 0 until known */
};

rm_status_t rm_gate_create(const rm_gate_config_t *cfg, rm_gate_t **out)
{
  if (cfg == NULL || out == NULL || cfg->world < 1 || cfg->world > 65536)
    return RM_ERR_INVALID_ARG;
  switch (cfg->policy) {
  case RM_GATE_ALL: break;
  case RM_GATE_FIRST_K:
    if (cfg->k < 1 || cfg->k > cfg->world) return RM_ERR_INVALID_ARG;
    break;
  case RM_GATE_DEADLINE:
    if (!(cfg->slack_ms >= 0.0)) return RM_ERR_INVALID_ARG;
    break;
  case RM_GATE_CODED:
    if (cfg->s < 0 || cfg->s >= cfg->world || cfg->world % (cfg->s + 1) != 0)
      return RM_ERR_INVALID_ARG;
    break;
  default: return RM_ERR_INVALID_ARG;
  }
  rm_gate_t *g = rm__xcalloc(1, sizeof *g);
  g->cfg = *cfg;
  g->arrived = rm__xcalloc((size_t)cfg->world, 1);
  g->members = rm__xcalloc((size_t)cfg->world, 1);
  g->group_hits = rm__xcalloc((size_t)cfg->world, sizeof(int));
  rm_gate_reset(g, 0);
  *out = g;
  return RM_OK;
}

void rm_gate_destroy(rm_gate_t *g)
{
  if (g == NULL) return;
  free(g->arrived);
  free(g->members);
  free(g->group_hits);
  free(g);
}

void rm_gate_reset(rm_gate_t *g, uint64_t step)
{
  int w = g->cfg.world;
  memset(g->arrived, 0, (size_t)w);
  memset(g->members, 0, (size_t)w);
  memset(g->group_hits, 0, (size_t)w * sizeof(int));
  g->step = step;
  g->n_arrived = g->groups_hit = g->n_members = 0;
  g->decided = 0;
  g->t_med = -1.0;
}

static void decide(rm_gate_t *g)
{
  memcpy(g->members, g->arrived, (size_t)g->cfg.world); /* invariant 1 */
  g->n_members = g->n_arrived;
  g->decided = 1;
}

static void decide_if_ready(rm_gate_t *g, double now_ms)
{
  const rm_gate_config_t *c = &g->cfg;
  if (g->decided) return;
  switch (c->policy) {
  case RM_GATE_ALL:
    if (g->n_arrived == c->world) decide(g);
    break;
  case RM_GATE_FIRST_K:
    if (g->n_arrived >= c->k) decide(g);
    break;
  case RM_GATE_DEADLINE:
    if (g->n_arrived == c->world ||
        (g->t_med >= 0.0 && now_ms >= g->t_med + c->slack_ms))
      decide(g);
    break;
  case RM_GATE_CODED:
    if (g->groups_hit == c->world / (c->s + 1)) decide(g);
    break;
  }
}

rm_status_t rm_gate_arrive(rm_gate_t *g, int rank, double now_ms,
                           rm_gate_state_t *state)
{
  if (g == NULL || rank < 0 || rank >= g->cfg.world) return RM_ERR_INVALID_ARG;
  rm_gate_state_t st;
  if (g->decided) {
    st = g->members[rank] ? RM_GATE_DECIDED : RM_GATE_LATE;
    g->arrived[rank] = 1; /* noted, but members stay fixed */
    goto out;
  }
  /* a deadline that passed before this arrival decides without it */
  decide_if_ready(g, now_ms);
  if (g->decided) {
    st = RM_GATE_LATE;
    goto out;
  }
  if (!g->arrived[rank]) {
    g->arrived[rank] = 1;
    g->n_arrived++;
    if (g->cfg.policy == RM_GATE_CODED &&
        g->group_hits[rank / (g->cfg.s + 1)]++ == 0)
      g->groups_hit++;
    if (g->cfg.policy == RM_GATE_DEADLINE && g->t_med < 0.0 &&
        g->n_arrived == (g->cfg.world + 1) / 2)
      g->t_med = now_ms;
  }
  decide_if_ready(g, now_ms);
  st = g->decided ? RM_GATE_DECIDED : RM_GATE_WAIT;
out:
  if (state != NULL) *state = st;
  return RM_OK;
}

void rm_gate_poll(rm_gate_t *g, double now_ms, rm_gate_state_t *state,
                  double *wake_ms)
{
  decide_if_ready(g, now_ms);
  if (state != NULL) *state = g->decided ? RM_GATE_DECIDED : RM_GATE_WAIT;
  if (wake_ms != NULL)
    *wake_ms = (!g->decided && g->cfg.policy == RM_GATE_DEADLINE && g->t_med >= 0.0)
                   ? g->t_med + g->cfg.slack_ms
                   : -1.0;
}

const uint8_t *rm_gate_members(const rm_gate_t *g, int *count)
{
  if (g == NULL || !g->decided) return NULL;
  if (count != NULL) *count = g->n_members;
  return g->members;
}

rm_status_t rm_gate_set_slack(rm_gate_t *g, double slack_ms)
{
  if (g == NULL || g->cfg.policy != RM_GATE_DEADLINE || !(slack_ms >= 0.0))
    return RM_ERR_INVALID_ARG;
  g->cfg.slack_ms = slack_ms;
  return RM_OK;
}

uint64_t rm_gate_step(const rm_gate_t *g) { return g ? g->step : 0; }
