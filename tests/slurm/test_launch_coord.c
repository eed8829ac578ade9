/*
 * test_launch_coord.c - the coordinator bridge (launch_coord.h) with the
 * local launcher and real child processes, without a coordinator: the two
 * coordinator functions it calls are replaced by recorders.
 *
 *   a job whose worker 1 exits 3   -> job_fail(id, "worker 1 ... status 3")
 *   a job that runs, then stop()   -> workers terminated, entry dropped,
 *                                     no job_fail (the coordinator ended it)
 *   the k8s launcher               -> manifests file in the job folder, not watched
 *   registration                   -> local, slurm, k8s
 */
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_coord.h"
#include "launch_test_util.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_failed_job;
static char g_failed_reason[256];
static int g_fail_calls;
static const char *g_registered[8];
static int g_nreg;
static rm_coord_launcher_t g_local, g_k8s;

static rm_status_t fake_fail(rm_coord_t *c, uint64_t id, const char *reason)
{
  pthread_mutex_lock(&g_mu);
  g_failed_job = id;
  snprintf(g_failed_reason, sizeof g_failed_reason, "%s", reason);
  g_fail_calls++;
  pthread_mutex_unlock(&g_mu);
  return RM_OK;
}

static rm_status_t fake_register(rm_coord_t *c, const rm_coord_launcher_t *l)
{
  g_registered[g_nreg++] = l->name;
  if (strcmp(l->name, "local") == 0) g_local = *l;
  if (strcmp(l->name, "k8s") == 0) g_k8s = *l;
  return RM_OK;
}

static int fail_calls(void)
{
  pthread_mutex_lock(&g_mu);
  int n = g_fail_calls;
  pthread_mutex_unlock(&g_mu);
  return n;
}

static void job_init(rm_job_info_t *j, uint64_t id, int world, const char *workload)
{
  memset(j, 0, sizeof *j);
  j->id = id;
  j->spec.world_size = world;
  snprintf(j->spec.name, sizeof j->spec.name, "job%d", (int)id);
  snprintf(j->spec.workload, sizeof j->spec.workload, "%s", workload);
  snprintf(j->token, sizeof j->token, "secret");
  j->state = RM_JOB_PENDING;
}

int main(void)
{
  char dir[256], worker[300], logs[300], path[600], err[256];
  lt_tmpdir(dir, sizeof dir, "launch-coord");
  snprintf(worker, sizeof worker, "%s/fake-worker", dir);
  snprintf(logs, sizeof logs, "%s/logs", dir);
  /* The workload name picks the behaviour. */
  lt_write(worker, "#!/bin/sh\necho \"index=$RINGMASTER_LAUNCH_INDEX $*\"\n"
                   "case \"$*\" in\n"
                   "  *fail-one*) [ \"$RINGMASTER_LAUNCH_INDEX\" = 1 ] && exit 3; exit 0 ;;\n"
                   "  *sleep*) exec sleep 300 ;;\n"
                   "esac\nexit 0\n", 0755);

  rm_launch_coord_options_t o;
  rm_launch_coord_options_init(&o);
  o.log_dir = logs;
  o.worker_path = worker;
  o.grace_ms = 500;
  o.job_fail = fake_fail;
  rm_launch_coord_t *b = NULL;
  CHECK(rm_launch_coord_create(&o, &b, err, sizeof err) == RM_OK);
  if (b == NULL) return 1;
  CHECK(rm_launch_coord_register(b, NULL, fake_register) == RM_OK);
  CHECK(g_nreg == 3 && strcmp(g_registered[0], "local") == 0 &&
           strcmp(g_registered[1], "slurm") == 0 && strcmp(g_registered[2], "k8s") == 0);

  rm_job_info_t j;
  job_init(&j, 11, 3, "fail-one");
  CHECK(g_local.start(g_local.ctx, &j, "127.0.0.1:7070", err, sizeof err) == RM_OK);
  for (int i = 0; i < 3000 && fail_calls() == 0; i++) usleep(10000);
  CHECK(fail_calls() == 1 && g_failed_job == 11);
  CHECK(strstr(g_failed_reason, "worker 1") && strstr(g_failed_reason, "status 3"));
  rm_launch_coord_log_path(b, 11, 2, path, sizeof path);
  CHECK(lt_file_has(path, "index=2 --coordinator 127.0.0.1:7070 --job 11 --token secret "
                             "--workload fail-one"));
  for (int i = 0; i < 3000 && rm_launch_coord_active(b) != 0; i++) usleep(10000);
  CHECK(rm_launch_coord_active(b) == 0);

  job_init(&j, 12, 2, "sleep");
  CHECK(g_local.start(g_local.ctx, &j, "127.0.0.1:7070", err, sizeof err) == RM_OK);
  usleep(300000);
  CHECK(rm_launch_coord_active(b) == 1);
  j.state = RM_JOB_CANCELLED;
  g_local.stop(g_local.ctx, &j);
  for (int i = 0; i < 3000 && rm_launch_coord_active(b) != 0; i++) usleep(10000);
  CHECK(rm_launch_coord_active(b) == 0);
  CHECK(fail_calls() == 1); /* stopped by the coordinator: no job_fail */

  /* A missing worker binary fails start with a message; nothing is watched. */
  rm_launch_coord_destroy(b, 1);
  o.worker_path = "/nonexistent/ringmaster-worker";
  b = NULL;
  g_nreg = 0;
  CHECK(rm_launch_coord_create(&o, &b, err, sizeof err) == RM_OK);
  if (b == NULL) return 1;
  rm_launch_coord_register(b, NULL, fake_register);
  job_init(&j, 13, 2, "x");
  CHECK(g_local.start(g_local.ctx, &j, "127.0.0.1:7070", err, sizeof err) ==
           RM_ERR_NOT_FOUND && strstr(err, "/nonexistent/ringmaster-worker"));
  CHECK(rm_launch_coord_active(b) == 0);

  /* k8s-manifest for a stored job. */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  job_init(&j, 14, 4, "train");
  CHECK(rm_launch_k8s_manifest(&j, "ringmaster:7070", "img:1", "ml", f, err,
                                  sizeof err) == RM_OK);
  fclose(f);
  CHECK(strstr(text, "completions: 4\n") && strstr(text, "subdomain: rm-14-workers\n") &&
           strstr(text, "namespace: \"ml\"") && strstr(text, "image: \"img:1\""));
  free(text);
  /* on_failure replace under k8s: the Indexed Job replaces the pod itself
   * (backoffLimit = max_restarts), so relaunch is accepted and starts nothing;
   * without replace it is refused. */
  job_init(&j, 16, 3, "train");
  snprintf(j.spec.on_failure, sizeof j.spec.on_failure, "replace");
  j.spec.max_restarts = 2;
  f = open_memstream(&text, &len);
  CHECK(rm_launch_k8s_manifest(&j, "ringmaster:7070", NULL, NULL, f, err, sizeof err) == RM_OK);
  fclose(f);
  CHECK(strstr(text, "\n  backoffLimit: 2\n") != NULL);
  free(text);
  CHECK(g_k8s.relaunch && g_k8s.relaunch(g_k8s.ctx, &j, "127.0.0.1:7070", err, sizeof err) ==
                              RM_OK);
  snprintf(j.spec.on_failure, sizeof j.spec.on_failure, "fail");
  CHECK(g_k8s.relaunch(g_k8s.ctx, &j, "127.0.0.1:7070", err, sizeof err) == RM_ERR_UNSUPPORTED);
  /* After shutdown (before the coordinator closes) start refuses, stop is a no-op. */
  rm_launch_coord_shutdown(b, 1);
  job_init(&j, 15, 1, "ok");
  CHECK(g_local.start(g_local.ctx, &j, "127.0.0.1:7070", err, sizeof err) ==
           RM_ERR_UNAVAILABLE);
  g_local.stop(g_local.ctx, &j);
  rm_launch_coord_destroy(b, 0);

  if (rm_check_failures == 0) lt_rmrf(dir);
  printf("%s: %d failure(s)\n", rm_check_failures ? "FAIL" : "PASS", rm_check_failures);
  return rm_check_failures ? 1 : 0;
}
