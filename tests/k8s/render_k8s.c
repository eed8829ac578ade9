/*
 * render_k8s.c - print the worker manifests the coordinator renders for a job
 * (the code behind `ringmaster k8s-manifest JOB`), for the validator:
 *
 *   render_k8s JOB_ID WORLD COORDINATOR TOKEN [IMAGE [NAMESPACE]] | node validate.mjs -
 *
 * RENDER_COMMAND="ARG ARG ..." (space-separated) renders a command job
 * instead of a train job: same manifests, the agent learns the
 * command through Attach.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_coord.h"

int main(int argc, char **argv)
{
  rm_job_info_t job;
  char err[256];
  if (argc < 5) {
    fprintf(stderr, "usage: %s JOB_ID WORLD COORDINATOR TOKEN [IMAGE [NAMESPACE]]\n", argv[0]);
    return 2;
  }
  memset(&job, 0, sizeof job);
  job.id = strtoull(argv[1], NULL, 10);
  job.spec.world_size = atoi(argv[2]);
  snprintf(job.spec.workload, sizeof job.spec.workload, "train");
  const char *replace = getenv("RENDER_REPLACE"); /* on_failure replace, max_restarts N */
  if (replace && *replace) {
    snprintf(job.spec.on_failure, sizeof job.spec.on_failure, "replace");
    job.spec.max_restarts = atoi(replace);
  }
  const char *cmd = getenv("RENDER_COMMAND");
  if (cmd && *cmd) {
    char buf[1024], *save = NULL;
    size_t used = 0;
    snprintf(job.spec.workload, sizeof job.spec.workload, "command");
    snprintf(buf, sizeof buf, "%s", cmd);
    for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
      size_t n = strlen(t) + 1; /* packed: NUL-terminated strings back to back */
      if (used + n > sizeof job.spec.command) return 2;
      memcpy(job.spec.command + used, t, n);
      used += n;
      job.spec.command_argc++;
    }
  }
  snprintf(job.token, sizeof job.token, "%s", argv[4]);
  if (rm_launch_k8s_manifest(&job, argv[3], argc > 5 ? argv[5] : NULL,
                             argc > 6 ? argv[6] : NULL, stdout, err, sizeof err) != RM_OK) {
    fprintf(stderr, "render_k8s: %s\n", err);
    return 1;
  }
  return 0;
}
