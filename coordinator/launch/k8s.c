/*
 * k8s.c - the `k8s` launcher (manifest renderer) and the `none` launcher.
 *
 * k8s renders, for one submitted job, three objects in one YAML stream:
 *
 *   Secret  rm-<id>-token     stringData.token: the job's join token
 *   Service rm-<id>-workers   headless (clusterIP: None), selects the pods
 *                             by {app.kubernetes.io/name: ringmaster-worker,
 *                             ringmaster.io/job: <id>}, publishes not-ready
 *                             addresses so peers resolve before readiness
 *   Job     rm-<id>-workers   label ringmaster.io/world-size: "<world>",
 *                             completionMode: Indexed, completions ==
 *                             parallelism == world, backoffLimit = the
 *                             pods it may replace (on_failure replace:
 *                             max_restarts; else 0), restartPolicy Never:
 *                             a failed pod is replaced by a NEW pod of the
 *                             same completion index, which joins afresh as
 *                             the job's replacement worker,
 *                             template.spec.subdomain == the Service's name,
 *                             pod labels == the Service's selector;
 *                             JOB_COMPLETION_INDEX (also set by Kubernetes
 *                             itself) is the worker's rank hint
 *
 * <id> is the job id made a DNS-1123 label (lower case, [._] -> '-', at most
 * 40 characters). Strings are written as YAML double-quoted scalars with
 * JSON escapes, so no value can change the document's structure.
 * tests/k8s/validate.mjs checks exactly these invariants on this output.
 *
 * Nothing here talks to a cluster: start writes the manifests to
 * <log_dir>/k8s-workers.yaml (0600) and poll answers EXTERNAL; cancel is
 * NULL (the coordinator stops the workers through its control plane; the
 * user deletes the Job with kubectl).
 *
 * `none`: the user starts the workers themself (manual srun, a shell);
 * start only records the job, poll answers EXTERNAL.
 */
#include "launch_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rm_alloc.h"
#include "rm_log.h"

#define K8S_DEFAULT_IMAGE "ringmaster:latest"

typedef struct {
  struct rm__launch base;
  char msg[4300];
} external_t;

/* YAML double-quoted scalar (JSON string syntax is valid YAML). */
static void yq(FILE *f, const char *s)
{
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void dns_label(const char *id, char *out, size_t len)
{
  size_t n = 0;
  for (const char *p = id; *p && n + 1 < len && n < 40; p++)
    out[n++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
  while (n > 0 && out[n - 1] == '-') n--;
  out[n] = '\0';
  if (n == 0) snprintf(out, len, "job");
}

static void meta(FILE *f, const char *name, const rm_launch_spec_t *spec,
                 const char *label)
{
  fprintf(f, "metadata:\n  name: %s\n", name);
  if (spec->k8s_namespace != NULL && *spec->k8s_namespace) {
    fputs("  namespace: ", f);
    yq(f, spec->k8s_namespace);
    fputc('\n', f);
  }
  fprintf(f, "  labels:\n    app.kubernetes.io/name: ringmaster-worker\n"
             "    app.kubernetes.io/part-of: ringmaster\n    ringmaster.io/job: \"%s\"\n",
          label);
}

static void container_args(FILE *f, const rm_launch_spec_t *spec)
{
  const char *fixed[] = {"--coordinator", spec->coordinator, "--job", spec->job_id,
                         "--token", "$(RINGMASTER_TOKEN)"};
  fputs("          args:\n", f);
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    fputs("            - ", f);
    yq(f, fixed[i]);
    fputc('\n', f);
  }
  if (spec->workload != NULL && *spec->workload) {
    fputs("            - \"--workload\"\n            - ", f);
    yq(f, spec->workload);
    fputc('\n', f);
  }
  for (const char *const *a = spec->extra_args; a != NULL && *a != NULL; a++) {
    fputs("            - ", f);
    yq(f, *a);
    fputc('\n', f);
  }
}

static void render_job(FILE *f, const rm_launch_spec_t *spec, const char *label)
{
  fprintf(f, "apiVersion: batch/v1\nkind: Job\n");
  char name[64];
  snprintf(name, sizeof name, "rm-%s-workers", label);
  meta(f, name, spec, label);
  fprintf(f, "    ringmaster.io/world-size: \"%d\"\n", spec->world);
  fprintf(f, "spec:\n  completionMode: Indexed\n  completions: %d\n  parallelism: %d\n"
             "  backoffLimit: %d\n  template:\n    metadata:\n      labels:\n"
             "        app.kubernetes.io/name: ringmaster-worker\n"
             "        ringmaster.io/job: \"%s\"\n    spec:\n      subdomain: %s\n"
             "      restartPolicy: Never\n      containers:\n        - name: worker\n"
             "          image: ",
          spec->world, spec->world, spec->k8s_replacements > 0 ? spec->k8s_replacements : 0,
          label, name);
  yq(f, spec->k8s_image != NULL && *spec->k8s_image ? spec->k8s_image : K8S_DEFAULT_IMAGE);
  fputs("\n          command: [\"ringmaster-worker\"]\n", f);
  container_args(f, spec);
  fprintf(f, "          env:\n"
             "            - name: RINGMASTER_TOKEN\n              valueFrom:\n"
             "                secretKeyRef:\n                  name: rm-%s-token\n"
             "                  key: token\n"
             "            - name: JOB_COMPLETION_INDEX\n              valueFrom:\n"
             "                fieldRef:\n                  fieldPath: metadata.annotations"
             "['batch.kubernetes.io/job-completion-index']\n"
             "            - name: POD_IP\n              valueFrom:\n"
             "                fieldRef:\n                  fieldPath: status.podIP\n",
          label);
}

static rm_status_t k8s_render(const rm_launch_spec_t *spec, FILE *f, char *err,
                              size_t errlen)
{
  char label[48], name[64];
  dns_label(spec->job_id, label, sizeof label);
  fprintf(f, "# Worker manifests for ringmaster job %s (world size %d), rendered by the\n"
             "# coordinator. Apply with: kubectl apply -f FILE\n",
          spec->job_id, spec->world);
  fprintf(f, "apiVersion: v1\nkind: Secret\n");
  snprintf(name, sizeof name, "rm-%s-token", label);
  meta(f, name, spec, label);
  fputs("type: Opaque\nstringData:\n  token: ", f);
  yq(f, spec->token);
  fputs("\n---\napiVersion: v1\nkind: Service\n", f);
  snprintf(name, sizeof name, "rm-%s-workers", label);
  meta(f, name, spec, label);
  fprintf(f, "spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n"
             "  selector:\n    app.kubernetes.io/name: ringmaster-worker\n"
             "    ringmaster.io/job: \"%s\"\n---\n", label);
  render_job(f, spec, label);
  return ferror(f) ? rm__launch_err(err, errlen, RM_ERR_SYSTEM, "write failed") : RM_OK;
}

static rm_status_t k8s_start(const rm_launch_spec_t *spec, rm__launch_t **out,
                             char *err, size_t errlen)
{
  char path[4200];
  rm_status_t st = rm__launch_mkdir_p(spec->log_dir, err, errlen);
  if (st != RM_OK) return st;
  snprintf(path, sizeof path, "%s/k8s-workers.yaml", spec->log_dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (f == NULL) {
    if (fd >= 0) close(fd);
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "%s: %s", path, strerror(errno));
  }
  st = k8s_render(spec, f, err, errlen);
  if (fclose(f) != 0 && st == RM_OK)
    st = rm__launch_err(err, errlen, RM_ERR_SYSTEM, "writing %s failed", path);
  if (st != RM_OK) return st;
  external_t *e = rm__xcalloc(1, sizeof *e);
  e->base.ops = &rm__launcher_k8s;
  snprintf(e->msg, sizeof e->msg, "worker manifests in %s; apply with kubectl apply -f",
           path);
  RM_INFO("job %s: %s", spec->job_id, e->msg);
  *out = &e->base;
  return RM_OK;
}

static rm_status_t none_start(const rm_launch_spec_t *spec, rm__launch_t **out,
                              char *err, size_t errlen)
{
  external_t *e = rm__xcalloc(1, sizeof *e);
  e->base.ops = &rm__launcher_none;
  snprintf(e->msg, sizeof e->msg, "workers are started by the user: ringmaster-worker "
           "--coordinator %s --job %s --token ...", spec->coordinator, spec->job_id);
  *out = &e->base;
  return RM_OK;
}

static rm_status_t external_poll(rm__launch_t *base, rm_launch_state_t *state,
                                 char *msg, size_t msglen)
{
  *state = RM_LAUNCH_EXTERNAL;
  if (msg != NULL && msglen > 0) snprintf(msg, msglen, "%s", ((external_t *)base)->msg);
  return RM_OK;
}

static void external_destroy(rm__launch_t *base) { free(base); }

const rm__launcher_ops_t rm__launcher_k8s = {
    .name = "k8s",
    .start = k8s_start,
    .poll = external_poll,
    .cancel = NULL,
    .worker = NULL,
    .render = k8s_render,
    .destroy = external_destroy,
};

const rm__launcher_ops_t rm__launcher_none = {
    .name = "none",
    .start = none_start,
    .poll = external_poll,
    .cancel = NULL,
    .worker = NULL,
    .render = NULL,
    .destroy = external_destroy,
};
