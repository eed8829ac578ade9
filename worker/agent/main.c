/*
 * main.c - `ringmaster-worker`: argument parsing; the work is in agent.c.
 *
 *   ringmaster-worker --coordinator HOST:PORT --job ID --token T
 *                     [--workload NAME] [--workload-options K=V,...]
 *                     [--steps N] [--host NAME] [--data-addr HOST:PORT]
 *                     [--connect-timeout-ms N] [--data-timeout-ms N]
 *                     [--tls-ca PEM --tls-cert PEM --tls-key PEM]
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
#include "rm_param.h"

static void usage(FILE *f)
{
  fprintf(f, "usage: ringmaster-worker --coordinator HOST:PORT --job ID --token T\n"
             "       [--workload NAME] [--workload-options K=V,...] [--steps N]\n"
             "       [--host NAME] [--data-addr HOST:PORT] [--connect-timeout-ms N]\n"
             "       [--data-timeout-ms N] [--tls-ca PEM --tls-cert PEM --tls-key PEM]\n");
}

/* The hint sent in Join is also the worker's LAUNCH INDEX: the coordinator
 * stores it per worker (the N of the launcher's log worker-N.log, and how it
 * tells which member a dead process was). RINGMASTER_LAUNCH_INDEX wins: our
 * local launcher sets it for exactly this process, while SLURM_PROCID or
 * JOB_COMPLETION_INDEX may merely be inherited from a coordinator that
 * itself runs inside a Slurm step or an Indexed Job pod. */
static void hints(rm_agent_opts_t *o)
{
  const char *procid = getenv("SLURM_PROCID"), *ntasks = getenv("SLURM_NTASKS");
  const char *index = getenv("JOB_COMPLETION_INDEX");
  const char *lindex = getenv("RINGMASTER_LAUNCH_INDEX");
  o->rank_hint = -1;
  if (lindex && *lindex) {
    o->rank_hint = atoi(lindex);
    o->world_hint = (int)rm__env_int("RINGMASTER_LAUNCH_WORLD", 0);
  } else if (procid && ntasks) {
    o->rank_hint = atoi(procid);
    o->world_hint = atoi(ntasks);
  } else if (index) {
    o->rank_hint = atoi(index);
    o->world_hint = (int)rm__env_int("RINGMASTER_WORLD", 0);
  }
}

int main(int argc, char **argv)
{
  rm_agent_opts_t o;
  memset(&o, 0, sizeof o);
  o.connect_timeout_ms = 30000;
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
