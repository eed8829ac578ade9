/*
 * test_launch_local.c - the local launcher with real child processes.
 *
 * A fake worker (a /bin/sh script written into a temp folder) prints its
 * launch index, world and argv, writes to stderr, and then behaves as its
 * last argument says: ok (exit 0), fail-odd (odd indexes exit 3), sleep
 * (until signalled), ignore-term (ignores SIGTERM). Each case checks the
 * final state, per-worker exit codes/signals, the log contents, and that no
 * child is left behind (waitpid(-1) says ECHILD) and no fd leaked.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"
#include "launch_test_util.h"

static char g_dir[256], g_worker[300];

static const char k_fake_worker[] =
    "#!/bin/sh\n"
    "echo \"index=$RINGMASTER_LAUNCH_INDEX world=$RINGMASTER_LAUNCH_WORLD args=$*\"\n"
    "echo to-stderr >&2\n"
    "mode=; for a in \"$@\"; do mode=$a; done\n"
    "case \"$mode\" in\n"
    "  ok) exit 0 ;;\n"
    "  fail-odd) [ $((RINGMASTER_LAUNCH_INDEX % 2)) -eq 1 ] && exit 3; exit 0 ;;\n"
    "  sleep) exec sleep 300 ;;\n"
    "  ignore-term) trap '' TERM; echo ready; while :; do sleep 1; done ;;\n"
    "esac\n"
    "exit 99\n";

static void spec_init(rm_launch_spec_t *s, const char *sub, int world,
                      const char *const *extra)
{
  lt_spec_init(s, g_dir, sub, "j1", g_worker, world, extra);
}

/* 1 once no live (non-zombie) process is left in process group pgid; waits
 * up to 10 s because orphaned members are reaped by init asynchronously. */
static int group_gone(pid_t pgid)
{
  for (int tries = 0; tries < 1000; tries++) {
    if (kill(-pgid, 0) == -1 && errno == ESRCH) return 1;
    int live = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
      char path[300], buf[512];
      snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
      FILE *f = fopen(path, "r");
      if (f == NULL) continue;
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      fclose(f);
      buf[n] = '\0';
      char *rp = strrchr(buf, ')'), state = 0;
      int ppid = 0, pgrp = 0;
      if (rp != NULL && sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 &&
          pgrp == pgid && state != 'Z')
        live++;
    }
    if (d != NULL) closedir(d);
    if (live == 0) return 1;
    usleep(10000);
  }
  return 0;
}

static int no_children(void)
{
  return waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD;
}

static void case_ok(void)
{
  const char *extra[] = {"--mode", "ok", NULL};
  rm_launch_spec_t s;
  rm__launch_t *l = NULL;
  rm_launch_state_t st;
  char err[512], path[512];
  spec_init(&s, "ok", 3, extra);
  s.workload = "allreduce";
  CHECK(rm__launch_start(&rm__launcher_local, &s, &l, err, sizeof err) == RM_OK);
  if (l == NULL) return;
  CHECK(rm__launch_wait(l, 60000, &st, err, sizeof err) == RM_OK);
  CHECK(st == RM_LAUNCH_SUCCEEDED);
  for (int i = 0; i < 3; i++) {
    rm_launch_worker_t w;
    char want[64];
    CHECK(rm__launch_worker(l, i, &w) == RM_OK);
    CHECK(w.exited && w.exit_code == 0 && w.term_signal == 0);
    snprintf(path, sizeof path, "%s/worker-%d.log", s.log_dir, i);
    CHECK(strcmp(w.log_path, path) == 0);
    snprintf(want, sizeof want, "index=%d world=3 args=--coordinator", i);
    CHECK(lt_file_has(path, want));
    CHECK(lt_file_has(path, "--job j1 --token tok --workload allreduce --mode ok"));
    CHECK(lt_file_has(path, "to-stderr"));
    CHECK(lt_file_has(path, "# ringmaster local launcher: worker"));
    CHECK(lt_file_has(path, "--token ***")); /* header hides the token */
  }
  rm__launch_destroy(l);
  CHECK(no_children());
}

static void case_fail(void)
{
  const char *extra[] = {"fail-odd", NULL};
  rm_launch_spec_t s;
  rm__launch_t *l = NULL;
  rm_launch_state_t st;
  rm_launch_worker_t w;
  char err[512], msg[512];
  spec_init(&s, "fail", 4, extra);
  CHECK(rm__launch_start(&rm__launcher_local, &s, &l, err, sizeof err) == RM_OK);
  if (l == NULL) return;
  CHECK(rm__launch_wait(l, 60000, &st, msg, sizeof msg) == RM_OK);
  CHECK(st == RM_LAUNCH_FAILED);
  CHECK(strstr(msg, "worker 1") != NULL && strstr(msg, "status 3") != NULL);
  CHECK(rm__launch_worker(l, 0, &w) == RM_OK && w.exit_code == 0);
  CHECK(rm__launch_worker(l, 3, &w) == RM_OK && w.exit_code == 3);
  CHECK(rm__launch_worker(l, 4, &w) == RM_ERR_INVALID_ARG);
  rm__launch_destroy(l);
  CHECK(no_children());
}

/* cancel: SIGTERM for a cooperative worker, SIGKILL after the grace period
 * for one that ignores SIGTERM. */
static void case_cancel(const char *mode, int expect_sig)
{
  const char *extra[] = {mode, NULL};
  rm_launch_spec_t s;
  rm__launch_t *l = NULL;
  rm_launch_state_t st;
  char err[512], path[512];
  spec_init(&s, mode, 3, extra);
  s.grace_ms = 300;
  CHECK(rm__launch_start(&rm__launcher_local, &s, &l, err, sizeof err) == RM_OK);
  if (l == NULL) return;
  CHECK(rm__launch_poll(l, &st, err, sizeof err) == RM_OK && st == RM_LAUNCH_RUNNING);
  if (expect_sig == SIGKILL) { /* wait until the trap is installed */
    for (int i = 0; i < 3; i++) {
      snprintf(path, sizeof path, "%s/worker-%d.log", s.log_dir, i);
      for (int k = 0; k < 3000; k++) {
        char *t = lt_read(path);
        int ready = t != NULL && strstr(t, "ready") != NULL;
        free(t);
        if (ready) break;
        usleep(10000);
      }
    }
  }
  CHECK(rm__launch_cancel(l, err, sizeof err) == RM_OK);
  CHECK(rm__launch_cancel(l, err, sizeof err) == RM_OK); /* idempotent */
  CHECK(rm__launch_wait(l, 60000, &st, err, sizeof err) == RM_OK);
  CHECK(st == RM_LAUNCH_CANCELLED);
  for (int i = 0; i < 3; i++) {
    rm_launch_worker_t w;
    CHECK(rm__launch_worker(l, i, &w) == RM_OK);
    CHECK(w.exited && w.term_signal == expect_sig);
    CHECK(group_gone(w.pid)); /* the whole group is gone */
  }
  rm__launch_destroy(l);
  CHECK(no_children());
}

static void case_bad_worker(void)
{
  char bad[400], err[512];
  rm_launch_spec_t s;
  rm__launch_t *l = NULL;
  spec_init(&s, "bad", 2, NULL);
  snprintf(bad, sizeof bad, "%s/not-a-program", g_dir);
  lt_write(bad, "\x01\x02garbage", 0755); /* executable bit, no format: ENOEXEC */
  s.worker_path = bad;
  CHECK(rm__launch_start(&rm__launcher_local, &s, &l, err, sizeof err) == RM_ERR_NOT_FOUND);
  CHECK(l == NULL && strstr(err, "cannot execute") && strstr(err, bad));
  CHECK(no_children());
  snprintf(bad, sizeof bad, "%s/missing", g_dir);
  CHECK(rm__launch_start(&rm__launcher_local, &s, &l, err, sizeof err) == RM_ERR_NOT_FOUND);
  CHECK(strstr(err, "worker_path") != NULL);
}

static void case_validate(void)
{
  rm_launch_spec_t s;
  char err[512];
  spec_init(&s, "v", 0, NULL);
  CHECK(rm__launcher_find("bogus") == NULL);
  CHECK(rm__launcher_find(NULL) == &rm__launcher_local);
  CHECK(rm__launcher_find("slurm") == &rm__launcher_slurm);
  CHECK(rm__launch_validate(NULL, &s, err, sizeof err) == RM_ERR_INVALID_ARG &&
           strstr(err, "launcher") && strstr(err, "slurm"));
  CHECK(rm__launch_validate(&rm__launcher_local, &s, err, sizeof err) ==
               RM_ERR_INVALID_ARG && strstr(err, "world_size"));
  s.world = 2;
  s.coordinator = "nocolon";
  CHECK(rm__launch_validate(&rm__launcher_local, &s, err, sizeof err) ==
               RM_ERR_INVALID_ARG && strstr(err, "coordinator"));
  s.coordinator = "h:1";
  s.job_id = "a/b";
  CHECK(rm__launch_validate(&rm__launcher_local, &s, err, sizeof err) ==
               RM_ERR_INVALID_ARG && strstr(err, "job_id"));
  s.job_id = "j";
  CHECK(rm__launch_validate(&rm__launcher_local, &s, err, sizeof err) == RM_OK);
}

static void case_render(void)
{
  rm_launch_spec_t s;
  char *text = NULL, err[256];
  size_t len = 0;
  spec_init(&s, "r", 2, NULL);
  s.token = "it's";
  FILE *f = open_memstream(&text, &len);
  CHECK(rm__launch_render(&rm__launcher_local, &s, f, err, sizeof err) == RM_OK);
  fclose(f);
  CHECK(strstr(text, "RINGMASTER_LAUNCH_INDEX=1 RINGMASTER_LAUNCH_WORLD=2") != NULL);
  CHECK(strstr(text, "'--token' 'it'\\''s'") != NULL);
  free(text);
}

int main(void)
{
  char path[300];
  signal(SIGPIPE, SIG_IGN);
  lt_tmpdir(g_dir, sizeof g_dir, "launch-local");
  snprintf(g_worker, sizeof g_worker, "%s/fake-worker", g_dir);
  lt_write(g_worker, k_fake_worker, 0755);
  int fds = lt_count_fds();
  case_validate();
  case_ok();
  case_fail();
  case_cancel("sleep", SIGTERM);
  case_cancel("ignore-term", SIGKILL);
  case_bad_worker();
  case_render();
  CHECK(lt_count_fds() == fds);
  snprintf(path, sizeof path, "%s", g_dir);
  if (rm_check_failures == 0) lt_rmrf(path);
  else fprintf(stderr, "kept %s for inspection\n", path);
  printf("%s: %d failure(s)\n", rm_check_failures ? "FAIL" : "PASS", rm_check_failures);
  return rm_check_failures ? 1 : 0;
}
