/*
 * test_launch_slurm.c - the slurm launcher.
 *
 *   test_launch_slurm script  no cluster needed: the generated batch script
 *       (#SBATCH lines, `bash -n`, and the argv srun really receives, through
 *       a fake srun on PATH, with a token and args that need quoting); a
 *       refusing sbatch fails start with sbatch's message; the squeue/sacct
 *       state mapping and scancel, through fake commands on PATH.
 *   test_launch_slurm rig     against a running cluster (SLURM_CONF set, see
 *       run_rig_test.sh): a 2-task job through sbatch+srun with per-task logs
 *       and SLURM_PROCID, scancel of a running job, a refused submission.
 *   test_launch_slurm launch JOB TOKEN COORD WORKER WORLD LOGDIR
 *       helper for real_job.sh: real workers through the launcher.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch.h"
#include "launch_test_util.h"

static char g_dir[256], g_worker[300], g_fake[300];

static const char k_fake_worker[] =
    "#!/bin/sh\n"
    "echo \"procid=$SLURM_PROCID ntasks=$SLURM_NTASKS args=$*\"\n"
    "mode=; for a in \"$@\"; do mode=$a; done\n"
    "case \"$mode\" in\n"
    "  ok) exit 0 ;;\n"
    "  sleep) exec sleep 300 ;;\n"
    "esac\n"
    "exit 99\n";

static void spec_init(rm_launch_spec_t *s, const char *sub, int world,
                      const char *const *extra)
{
  lt_spec_init(s, g_dir, sub, "j-7", g_worker, world, extra);
  s->poll_interval_ms = 1;
  s->cmd_timeout_ms = 30000;
}

static char *render(const rm_launch_spec_t *s)
{
  char *text = NULL, err[256];
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(rm__launch_render(&rm__launcher_slurm, s, f, err, sizeof err) == RM_OK);
  fclose(f);
  return text;
}

/* Run a shell command line and return its stdout (malloc'd). */
static char *sh(const char *cmd)
{
  char *out = NULL;
  size_t len = 0;
  FILE *p = popen(cmd, "r"), *m = open_memstream(&out, &len);
  int c;
  while (p != NULL && (c = fgetc(p)) != EOF) fputc(c, m);
  int rc = p ? pclose(p) : -1;
  fclose(m);
  if (rc != 0) fprintf(stderr, "  '%s' exited %d\n", cmd, rc);
  return out;
}

/* Write script t (freed) as g_dir/name, check it with bash -n, then run
 * it with env before bash (the fake srun prints one <arg> per line):
 * returns what it printed (malloc'd). */
static char *run_script(char *t, const char *name, const char *env)
{
  char path[600], cmd[1400];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  lt_write(path, t, 0600);
  free(t);
  snprintf(cmd, sizeof cmd, "bash -n '%s' && echo syntax-ok", path);
  t = sh(cmd);
  CHECK(t != NULL && strcmp(t, "syntax-ok\n") == 0);
  free(t);
  snprintf(cmd, sizeof cmd, "%s bash '%s'", env, path);
  return sh(cmd);
}

static void case_script(void)
{
  const char *extra[] = {"--steps", "a b", NULL};
  const char *sb[] = {"--exclusive", NULL};
  rm_launch_spec_t s;
  char want[600];
  spec_init(&s, "script", 3, extra);
  s.token = "to'k $x";
  s.workload = "train";
  s.slurm_partition = "debug";
  s.slurm_time_limit_min = 5;
  s.slurm_sbatch_args = sb;
  char *t = render(&s);
  CHECK(strncmp(t, "#!/bin/bash\n", 12) == 0);
  CHECK(strstr(t, "\n#SBATCH --job-name=ringmaster-j-7\n") != NULL);
  CHECK(strstr(t, "\n#SBATCH --ntasks=3\n") != NULL);
  CHECK(strstr(t, "\n#SBATCH --partition=debug\n") != NULL);
  CHECK(strstr(t, "\n#SBATCH --time=5\n") != NULL);
  CHECK(strstr(t, "\n#SBATCH --exclusive\n") != NULL);
  snprintf(want, sizeof want, "\n#SBATCH --output=%s/slurm-%%j.out\n", s.log_dir);
  CHECK(strstr(t, want) != NULL);
  CHECK(strstr(t, "exec srun --kill-on-bad-exit=0") != NULL);
  t = run_script(t, "rendered.sbatch", ""); /* quoting must survive */
  snprintf(want, sizeof want, "<--output=%s/worker-%%t.log>\n<%s>\n<--coordinator>\n"
           "<127.0.0.1:7070>\n<--job>\n<j-7>\n<--token>\n<to'k $x>\n<--workload>\n"
           "<train>\n<--steps>\n<a b>\n", s.log_dir, g_worker);
  CHECK(t != NULL && strstr(t, want) != NULL);
  if (t == NULL || strstr(t, want) == NULL) fprintf(stderr, "got:\n%s\nwant:\n%s", t, want);
  free(t);
  /* with relays (serve --slurm-relay): a relay step per node in the
   * background, the workers' srun with RINGMASTER_RELAY, the script's exit
   * its status */
  s.slurm_relay = "/opt/rm/ringmaster";
  t = render(&s);
  CHECK(strstr(t, "\nexport RINGMASTER_RELAY=\"unix:/tmp/ringmaster-relay-${SLURM_JOB_ID}.sock\"\n") !=
        NULL);
  CHECK(strstr(t, "\nsrun -N \"$SLURM_JOB_NUM_NODES\" -n \"$SLURM_JOB_NUM_NODES\" "
                  "--ntasks-per-node=1 --overlap --output=") != NULL);
  CHECK(strstr(t, "'/opt/rm/ringmaster' relay --coordinator \"$RINGMASTER_COORDINATOR\" --listen "
                  "\"$RINGMASTER_RELAY\" &\n") != NULL);
  CHECK(strstr(t, "exec srun") == NULL && strstr(t, "\nsrun --kill-on-bad-exit=0") != NULL);
  CHECK(strstr(t, " || rc=$?\nkill \"$relay\"") != NULL && strstr(t, "exit \"$rc\"\n") != NULL);
  /* both steps' arguments, the workers' intact */
  t = run_script(t, "relay.sbatch", "SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=1");
  CHECK(t != NULL && strstr(t, want) != NULL && strstr(t, "<relay>\n<--coordinator>\n") &&
        strstr(t, "<unix:/tmp/ringmaster-relay-42.sock>\n"));
  if (t == NULL || strstr(t, want) == NULL) fprintf(stderr, "got:\n%s\nwant:\n%s", t, want);
  free(t);
  s.slurm_relay = NULL;
  s.log_dir = "/tmp/with space";
  char err[256];
  CHECK(rm__launch_render(&rm__launcher_slurm, &s, stdout, err, sizeof err) ==
           RM_ERR_INVALID_ARG && strstr(err, "log_dir"));
}

static void fake_state(const char *cmd, const char *text)
{
  char path[400];
  snprintf(path, sizeof path, "%s/%s.state", g_fake, cmd);
  lt_write(path, text, 0644);
}

static rm_launch_state_t poll_now(rm__launch_t *l, char *msg, size_t len)
{
  rm_launch_state_t st = RM_LAUNCH_PENDING;
  usleep(2000); /* past the 1 ms poll cache */
  CHECK(rm__launch_poll(l, &st, msg, len) == RM_OK);
  return st;
}

static void case_fake_cluster(void)
{
  rm_launch_spec_t s;
  rm__launch_t *l = NULL;
  char err[512], path[600];
  struct stat sb;
  spec_init(&s, "fake", 2, NULL);
  fake_state("sbatch", "fail");
  CHECK(rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) ==
           RM_ERR_UNAVAILABLE);
  CHECK(l == NULL && strstr(err, "Invalid partition name specified") != NULL);
  snprintf(path, sizeof path, "%s/job.sbatch", s.log_dir);
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);

  fake_state("sbatch", "ok");
  fake_state("squeue", "PENDING\n");
  CHECK(rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) == RM_OK);
  if (l == NULL) return;
  CHECK(strcmp(rm__launch_external_id(l), "4242") == 0);
  CHECK(poll_now(l, err, sizeof err) == RM_LAUNCH_PENDING);
  fake_state("squeue", "RUNNING\n");
  CHECK(poll_now(l, err, sizeof err) == RM_LAUNCH_RUNNING);
  /* on_failure replace: one more worker, a one-task Slurm job with launch
   * index world + 0 = 2; its script runs one srun task logging worker-2.log */
  int index = -1;
  CHECK(rm__launch_add(l, &index, err, sizeof err) == RM_OK && index == 2);
  snprintf(path, sizeof path, "%s/sbatch.args", g_fake);
  CHECK(lt_file_has(path, "--export=ALL,RINGMASTER_LAUNCH_INDEX=2,RINGMASTER_LAUNCH_WORLD=2"));
  CHECK(lt_file_has(path, "/replace.sbatch"));
  {
    char cmd[1400], want[700];
    snprintf(cmd, sizeof cmd, "RINGMASTER_LAUNCH_INDEX=2 RINGMASTER_LAUNCH_WORLD=2 bash "
             "'%s/replace.sbatch'", s.log_dir);
    char *t = sh(cmd);
    snprintf(want, sizeof want, "<--ntasks=1>\n<--output=%s/worker-2.log>\n", s.log_dir);
    CHECK(t != NULL && strstr(t, want) != NULL);
    if (t == NULL || strstr(t, want) == NULL) fprintf(stderr, "got:\n%s\nwant:\n%s", t, want);
    free(t);
  }
  /* final only when the replacement is too */
  fake_state("squeue", "COMPLETED\n");
  CHECK(poll_now(l, err, sizeof err) == RM_LAUNCH_SUCCEEDED);
  fake_state("squeue", "RUNNING\n");
  CHECK(rm__launch_cancel(l, err, sizeof err) == RM_OK); /* all final: nothing to cancel */
  rm__launch_destroy(l);
  l = NULL;
  CHECK(rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) == RM_OK);
  if (l == NULL) return;
  CHECK(poll_now(l, err, sizeof err) == RM_LAUNCH_RUNNING);
  CHECK(rm__launch_add(l, &index, err, sizeof err) == RM_OK && index == 2);
  CHECK(rm__launch_cancel(l, err, sizeof err) == RM_OK);
  snprintf(path, sizeof path, "%s/scancel.args", g_fake);
  CHECK(lt_file_has(path, "4242 4242")); /* the batch job and its replacement */
  CHECK(poll_now(l, err, sizeof err) == RM_LAUNCH_CANCELLING);
  fake_state("squeue", "");
  fake_state("sacct", "CANCELLED by 0\n");
  CHECK(poll_now(l, err, sizeof err) == RM_LAUNCH_CANCELLED);
  rm__launch_destroy(l);

  static const struct { const char *sq, *sa; rm_launch_state_t want; const char *msg; } m[] = {
      {"COMPLETED\n", "", RM_LAUNCH_SUCCEEDED, ""},
      {"", "FAILED\n", RM_LAUNCH_FAILED, "ended FAILED"},
      {"TIMEOUT\n", "", RM_LAUNCH_FAILED, "ended TIMEOUT"},
      {"", "CANCELLED by 0\n", RM_LAUNCH_FAILED, "cancelled outside ringmaster"},
      {"", "", RM_LAUNCH_FAILED, "unknown to squeue and sacct"},
  };
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    l = NULL;
    fake_state("squeue", m[i].sq);
    fake_state("sacct", m[i].sa);
    CHECK(rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) == RM_OK);
    if (l == NULL) continue;
    CHECK(poll_now(l, err, sizeof err) == m[i].want);
    CHECK(strstr(err, m[i].msg) != NULL);
    rm__launch_destroy(l);
  }
}

/* Fake sbatch/squeue/sacct/scancel/srun, driven by files in g_fake. */
static void install_fakes(void)
{
  char path[400], *old = getenv("PATH"), newpath[4096];
  static const struct { const char *name, *body; } f[] = {
      {"srun", "#!/bin/sh\nprintf '<%s>\\n' \"$@\"\n"},
      {"sbatch", "#!/bin/sh\nif [ \"$(cat \"$RM_FAKE_DIR/sbatch.state\")\" = fail ]; then\n"
                 "  echo 'sbatch: error: Batch job submission failed: Invalid partition "
                 "name specified' >&2; exit 1; fi\necho \"$@\" > \"$RM_FAKE_DIR/sbatch.args\"\n"
                 "echo '4242;cluster'\n"},
      {"squeue", "#!/bin/sh\ncat \"$RM_FAKE_DIR/squeue.state\" 2>/dev/null\n"},
      {"sacct", "#!/bin/sh\ncat \"$RM_FAKE_DIR/sacct.state\" 2>/dev/null\n"},
      {"scancel", "#!/bin/sh\necho \"$@\" > \"$RM_FAKE_DIR/scancel.args\"\n"},
  };
  snprintf(g_fake, sizeof g_fake, "%s/fakebin", g_dir);
  mkdir(g_fake, 0755);
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", g_fake, f[i].name);
    lt_write(path, f[i].body, 0755);
  }
  snprintf(newpath, sizeof newpath, "%s:%s", g_fake, old ? old : "/usr/bin:/bin");
  setenv("PATH", newpath, 1);
  setenv("RM_FAKE_DIR", g_fake, 1);
}

/* ---- against a real cluster ---- */

static rm_launch_state_t wait_for(rm__launch_t *l, rm_launch_state_t want, int ms)
{
  rm_launch_state_t st = RM_LAUNCH_PENDING;
  char msg[512];
  for (int waited = 0; waited < ms; waited += 100) {
    CHECK(rm__launch_poll(l, &st, msg, sizeof msg) == RM_OK);
    if (st == want || rm__launch_state_final(st)) break;
    usleep(100000);
  }
  if (st != want) fprintf(stderr, "  state %s, wanted %s: %s\n", rm__launch_state_name(st),
                          rm__launch_state_name(want), msg);
  return st;
}

static void case_rig(void)
{
  const char *ok[] = {"ok", NULL}, *slp[] = {"sleep", NULL};
  rm_launch_spec_t s;
  rm__launch_t *l = NULL;
  char err[512], path[600];
  spec_init(&s, "rig-ok", 2, ok);
  s.poll_interval_ms = 200;
  CHECK(rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) == RM_OK);
  if (l == NULL) { fprintf(stderr, "  start: %s\n", err); return; }
  CHECK(wait_for(l, RM_LAUNCH_SUCCEEDED, 120000) == RM_LAUNCH_SUCCEEDED);
  for (int i = 0; i < 2; i++) {
    char want[64];
    snprintf(path, sizeof path, "%s/worker-%d.log", s.log_dir, i);
    snprintf(want, sizeof want, "procid=%d ntasks=2 args=--coordinator", i);
    CHECK(lt_file_has(path, want));
  }
  snprintf(path, sizeof path, "%s/slurm-%s.out", s.log_dir, rm__launch_external_id(l));
  CHECK(access(path, F_OK) == 0);
  rm__launch_destroy(l);

  l = NULL;
  spec_init(&s, "rig-cancel", 2, slp);
  s.poll_interval_ms = 200;
  CHECK(rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) == RM_OK);
  if (l == NULL) return;
  CHECK(wait_for(l, RM_LAUNCH_RUNNING, 120000) == RM_LAUNCH_RUNNING);
  CHECK(rm__launch_cancel(l, err, sizeof err) == RM_OK);
  CHECK(wait_for(l, RM_LAUNCH_CANCELLED, 120000) == RM_LAUNCH_CANCELLED);
  rm__launch_destroy(l);

  l = NULL;
  spec_init(&s, "rig-refused", 1, ok);
  s.slurm_partition = "nosuchpartition";
  CHECK(rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) ==
           RM_ERR_UNAVAILABLE);
  CHECK(l == NULL && strstr(err, "sbatch refused the job") &&
           strstr(err, "nvalid partition"));
  fprintf(stderr, "  refusal message: %s\n", err);
}

/* `launch JOB TOKEN COORD WORKER WORLD LOGDIR`: start a real worker job
 * through the slurm launcher and wait (5 min) for Slurm to report it done;
 * exit 0 on SUCCEEDED. Used by real_job.sh against a real coordinator. */
static int launch_real(char **a)
{
  rm_launch_spec_t s;
  rm__launch_t *l = NULL;
  char err[512];
  memset(&s, 0, sizeof s);
  s.job_id = a[0];
  s.token = a[1];
  s.coordinator = a[2];
  s.worker_path = a[3];
  s.world = atoi(a[4]);
  s.log_dir = a[5];
  s.poll_interval_ms = 500;
  if (rm__launch_start(&rm__launcher_slurm, &s, &l, err, sizeof err) != RM_OK) {
    fprintf(stderr, "start: %s\n", err);
    return 1;
  }
  rm_launch_state_t st = wait_for(l, RM_LAUNCH_SUCCEEDED, 300000);
  printf("slurm job %s: %s\n", rm__launch_external_id(l), rm__launch_state_name(st));
  rm__launch_destroy(l);
  return st == RM_LAUNCH_SUCCEEDED ? 0 : 1;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "script";
  if (strcmp(mode, "launch") == 0 && argc == 8) return launch_real(argv + 2);
  lt_tmpdir(g_dir, sizeof g_dir, "launch-slurm");
  snprintf(g_worker, sizeof g_worker, "%s/fake-worker", g_dir);
  lt_write(g_worker, k_fake_worker, 0755);
  if (strcmp(mode, "rig") == 0) {
    if (getenv("SLURM_CONF") == NULL) {
      fprintf(stderr, "rig mode needs SLURM_CONF (run through run_rig_test.sh)\n");
      return 2;
    }
    case_rig();
  } else {
    install_fakes();
    case_script();
    case_fake_cluster();
  }
  if (rm_check_failures == 0) lt_rmrf(g_dir);
  else fprintf(stderr, "kept %s for inspection\n", g_dir);
  printf("%s %s: %d failure(s)\n", rm_check_failures ? "FAIL" : "PASS", mode, rm_check_failures);
  return rm_check_failures ? 1 : 0;
}
