/*
 * main.c - `ringmaster-worker`: argument parsing; the work is in agent.c.
 *
 *   ringmaster-worker --coordinator HOST:PORT --job ID --token T
 *                     [--workload NAME] [--workload-options K=V,...]
 *                     [--steps N] [--host NAME] [--data-addr HOST:PORT]
 *                     [--connect-timeout-ms N] [--data-timeout-ms N]
 *                     [--tls-ca PEM --tls-cert PEM --tls-key PEM]
 *
 * RINGMASTER_COORDINATOR_TIMEOUT_MS (default 30000) is the default of
 * --connect-timeout-ms: how long an unreachable coordinator is retried,
 * and for a command job how long its program may take to join.
 *
 * Rank hints come from the local launcher's RINGMASTER_LAUNCH_INDEX/
 * RINGMASTER_LAUNCH_WORLD, else SLURM_PROCID/SLURM_NTASKS or
 * JOB_COMPLETION_INDEX (Kubernetes Indexed Job, world from RINGMASTER_WORLD):
 * the hint is the worker's launch index (its log is worker-<index>.log); the
 * coordinator also uses that index to tell which member a dead process was
 * (rm_coord_worker_exited). A replacement's index is >= the world, so the
 * hints are then unusable as ranks and the previous ranks are kept.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "rm_log.h"
#include "rm_param.h"

static void usage(FILE *f)
{
  fprintf(f, "usage: ringmaster-worker --coordinator HOST:PORT --job ID --token T\n"
             "       [--workload NAME] [--workload-options K=V,...] [--steps N]\n"
             "       [--host NAME] [--data-addr HOST:PORT] [--connect-timeout-ms N]\n"
             "       [--data-timeout-ms N] [--tls-ca PEM --tls-cert PEM --tls-key PEM]\n");
}

/* The rank hint (the launch index) and world hint come from the variables
 * the launchers set, read by the library (rm_session_config_from_env). */
static void hints(rm_agent_opts_t *o)
{
  rm_session_config_t cfg;
  rm_session_config_init(&cfg);
  (void)rm_session_config_from_env(&cfg); /* coordinator etc. come from argv */
  o->rank_hint = cfg.rank_hint;
  o->world_hint = cfg.world_hint;
}

int main(int argc, char **argv)
{
  rm_agent_opts_t o;
  rm__log_default(RM_LOG_INFO); /* a daemon's log is its record; not the program's (rm_log.h) */
  memset(&o, 0, sizeof o);
  o.connect_timeout_ms = (int)rm__env_int("RINGMASTER_COORDINATOR_TIMEOUT_MS", 30000);
  hints(&o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && ++i)
    if (OPT("--coordinator")) o.coordinator = v;
    else if (OPT("--job")) o.job_id = strtoull(v, NULL, 10);
    else if (OPT("--token")) o.token = v;
    else if (OPT("--workload")) o.workload = v;
    else if (OPT("--workload-options")) o.workload_options = v;
    else if (OPT("--steps")) o.steps = strtoull(v, NULL, 10);
    else if (OPT("--host")) o.host = v;
    else if (OPT("--data-addr")) o.data_addr = v;
    else if (OPT("--connect-timeout-ms")) o.connect_timeout_ms = atoi(v);
    else if (OPT("--data-timeout-ms")) o.data_timeout_ms = atoi(v);
    else if (OPT("--tls-ca")) o.tls_ca = v;
    else if (OPT("--tls-cert")) o.tls_cert = v;
    else if (OPT("--tls-key")) o.tls_key = v;
    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "ringmaster-worker: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
#undef OPT
  }
  if (!o.coordinator || !o.job_id || !o.token) {
    fprintf(stderr, "ringmaster-worker: --coordinator, --job and --token are required\n");
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return rm__agent_run(&o);
}
