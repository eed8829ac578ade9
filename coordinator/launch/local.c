/*
 * local.c - the `local` launcher: workers as child processes of the
 * coordinator on this host.
 *
 * Start (per worker i of n, all prepared before the first fork so the child
 * only makes async-signal-safe calls):
 *   parent: open <log_dir>/worker-<i>.log (truncate), write one header line
 *           (command without the token), make an O_CLOEXEC pipe, fork
 *   child:  setpgid(0,0); stdin </dev/null; stdout+stderr -> log;
 *           close_range(3.., CLOEXEC); execve(worker, argv, envp with
 *           RINGMASTER_LAUNCH_INDEX=i, RINGMASTER_LAUNCH_WORLD=n,
 *           RINGMASTER_LOCAL_RANK=i, RINGMASTER_LOCAL_WORLD=n: every worker
 *           is on this host; the agent of a command job maps them to
 *           LOCAL_RANK / LOCAL_WORLD_SIZE; a replacement, index i >= n,
 *           gets local rank i mod n)
 *           on failure: write errno into the pipe, _exit(127)
 *   parent: setpgid(pid,pid) too (no race with an early cancel); read the
 *           pipe: EOF = exec succeeded; an errno = start fails with
 *           "cannot execute PATH: reason" after killing and reaping the
 *           workers already started (nothing is left behind).
 *
 * Per-worker state:  alive --waitpid--> exited(code | signal)
 * Handle state (what poll reports):
 *   any alive:    RUNNING, or CANCELLING after cancel
 *   none alive:   CANCELLED after cancel; else FAILED if any worker exited
 *                 non-zero or by a signal (message names the first); else
 *                 SUCCEEDED.
 * add (replace): one more worker, index n = workers so far, same argv,
 *   RINGMASTER_LAUNCH_WORLD unchanged, log worker-<n>.log; it counts like
 *   the others in poll and cancel.
 * cancel: SIGTERM to each live worker's process group (the worker and what it
 * forked), and a deadline now + grace_ms; the first poll past the deadline
 * sends SIGKILL to the groups still alive. Reaping is waitpid(pid, WNOHANG)
 * on our own PIDs only: other children of the coordinator are not touched.
 */
#define _GNU_SOURCE
#include "launch_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/close_range.h>
#include <sys/syscall.h>

#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

extern char **environ;

typedef struct {
  pid_t pid;
  int exited, exit_code, term_signal;
  char *log_path;
} worker_t;

typedef struct {
  struct rm__launch base;
  int n;          /* workers started so far (world, then replacements) */
  int world;      /* RINGMASTER_LAUNCH_WORLD */
  worker_t *w;
  char *path;     /* worker binary */
  char **argv;    /* its argv, owned copies (for add) */
  char *log_dir;
  char *header;   /* log header tail: the command line without the token */
  int grace_ms;
  int cancelled, killed;
  int64_t kill_at_ns;
} local_t;

/* environ without our four hint variables, plus them (vars[0..3]: launch
 * index, launch world, local rank, local world), built per worker. */
static char **make_env(char **vars)
{
  size_t n = 0, k = 4;
  while (environ[n] != NULL) n++;
  char **env = rm__xcalloc(n + 5, sizeof *env);
  for (int v = 0; v < 4; v++) env[v] = vars[v];
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "RINGMASTER_LAUNCH_INDEX=", 24) != 0 &&
        strncmp(environ[i], "RINGMASTER_LAUNCH_WORLD=", 24) != 0 &&
        strncmp(environ[i], "RINGMASTER_LOCAL_RANK=", 22) != 0 &&
        strncmp(environ[i], "RINGMASTER_LOCAL_WORLD=", 23) != 0)
      env[k++] = environ[i];
  env[k] = NULL;
  return env;
}

static void child(const char *path, char **argv, char **env, int devnull,
                  int log_fd, int fail_w)
{
  setpgid(0, 0);
  if (dup2(devnull, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) goto fail;
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(path, argv, env);
fail:;
  int e = errno;
  if (write(fail_w, &e, sizeof e) < 0) _exit(127);
  _exit(127);
}

static char *make_header(const rm_launch_spec_t *spec)
{
  char buf[1024];
  snprintf(buf, sizeof buf, "--coordinator %s --job %s --token ***%s%s",
           spec->coordinator, spec->job_id, spec->workload ? " --workload " : "",
           spec->workload ? spec->workload : "");
  return rm__xstrdup(buf);
}

/* Kill (SIGKILL) and reap the first n workers: start's failure path. */
static void kill_started(local_t *l, int n)
{
  for (int i = 0; i < n; i++) {
    kill(-l->w[i].pid, SIGKILL);
    while (waitpid(l->w[i].pid, NULL, 0) < 0 && errno == EINTR) {}
  }
}

/* Fork worker i; RM_OK once it has exec'd. */
static rm_status_t spawn_one(local_t *l, int i, const char *path, char **argv,
                             char **env, int devnull, char *err, size_t errlen)
{
  int pf[2], e = 0;
  int fd = open(l->w[i].log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "open %s: %s",
                          l->w[i].log_path, strerror(errno));
  if (pipe2(pf, O_CLOEXEC) != 0) {
    close(fd);
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "pipe: %s", strerror(errno));
  }
  pid_t pid = fork();
  if (pid == 0) child(path, argv, env, devnull, fd, pf[1]);
  int fork_errno = errno;
  close(pf[1]);
  close(fd);
  if (pid < 0) {
    close(pf[0]);
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "fork: %s", strerror(fork_errno));
  }
  setpgid(pid, pid); /* EACCES after exec is fine: the child did it */
  l->w[i].pid = pid;
  ssize_t got;
  while ((got = read(pf[0], &e, sizeof e)) < 0 && errno == EINTR) {}
  close(pf[0]);
  if (got == (ssize_t)sizeof e) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    return rm__launch_err(err, errlen, RM_ERR_NOT_FOUND, "cannot execute %s: %s",
                          path, strerror(e));
  }
  return RM_OK;
}

static void local_destroy(rm__launch_t *base)
{
  local_t *l = (local_t *)base;
  for (int i = 0; i < l->n; i++) free(l->w[i].log_path);
  for (char **a = l->argv; a != NULL && *a != NULL; a++) free(*a);
  free(l->argv);
  free(l->w);
  free(l->path);
  free(l->log_dir);
  free(l->header);
  free(l);
}

/* Log file (truncated, one header line), then fork+exec worker i, whose
 * slot l->w[i] exists. */
static rm_status_t start_worker(local_t *l, int i, int devnull, char *err,
                                size_t errlen)
{
  char index_var[48], world_var[48], lrank_var[48], lworld_var[48];
  char *vars[4] = {index_var, world_var, lrank_var, lworld_var};
  size_t len = strlen(l->log_dir) + 32;
  l->w[i].log_path = rm__xmalloc(len);
  snprintf(l->w[i].log_path, len, "%s/worker-%d.log", l->log_dir, i);
  snprintf(index_var, sizeof index_var, "RINGMASTER_LAUNCH_INDEX=%d", i);
  snprintf(world_var, sizeof world_var, "RINGMASTER_LAUNCH_WORLD=%d", l->world);
  snprintf(lrank_var, sizeof lrank_var, "RINGMASTER_LOCAL_RANK=%d",
           l->world > 0 ? i % l->world : i);
  snprintf(lworld_var, sizeof lworld_var, "RINGMASTER_LOCAL_WORLD=%d", l->world);
  char **env = make_env(vars);
  int fd = open(l->w[i].log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); /* owner-only */
  if (fd >= 0) {
    /* a header that does not fit is said here; the worker's own output
     * that does not is reported by the bridge (coord_bridge.c LOG STORAGE);
     * an unopenable log fails the start in spawn_one */
    if (dprintf(fd, "# ringmaster local launcher: worker %d of %d: %s %s\n", i,
                l->world, l->path, l->header) < 0)
      RM_WARN("worker %d: cannot write its log %s: %s", i, l->w[i].log_path, strerror(errno));
    close(fd);
  }
  rm_status_t st = spawn_one(l, i, l->path, l->argv, env, devnull, err, errlen);
  free(env);
  return st;
}

/* One more worker (replace): index n, same command line. */
static rm_status_t local_add(rm__launch_t *base, int *index, char *err, size_t errlen)
{
  local_t *l = (local_t *)base;
  if (l->cancelled)
    return rm__launch_err(err, errlen, RM_ERR_DENIED, "launch is being cancelled");
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0)
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "/dev/null: %s", strerror(errno));
  l->w = rm__xrealloc(l->w, (size_t)(l->n + 1) * sizeof *l->w);
  memset(&l->w[l->n], 0, sizeof *l->w);
  rm_status_t st = start_worker(l, l->n, devnull, err, errlen);
  close(devnull);
  if (st != RM_OK) {
    free(l->w[l->n].log_path);
    return st;
  }
  RM_INFO("started replacement worker %d (pid %d), log %s", l->n,
          (int)l->w[l->n].pid, l->w[l->n].log_path);
  *index = l->n++;
  return RM_OK;
}

static rm_status_t local_start(const rm_launch_spec_t *spec, rm__launch_t **out,
                               char *err, size_t errlen)
{
  char path[4096];
  rm_status_t st = rm__launch_worker_path(spec, path, sizeof path, err, errlen);
  if (st != RM_OK) return st;
  if ((st = rm__launch_mkdir_p(spec->log_dir, err, errlen)) != RM_OK) return st;
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0)
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "/dev/null: %s", strerror(errno));
  local_t *l = rm__xcalloc(1, sizeof *l);
  l->base.ops = &rm__launcher_local;
  l->n = l->world = spec->world;
  l->grace_ms = spec->grace_ms > 0 ? spec->grace_ms : RM_LAUNCH_DEFAULT_GRACE_MS;
  l->w = rm__xcalloc((size_t)l->n, sizeof *l->w);
  l->path = rm__xstrdup(path);
  l->log_dir = rm__xstrdup(spec->log_dir);
  l->header = make_header(spec);
  char **argv = rm__launch_worker_argv(spec, path);
  size_t na = 0;
  while (argv[na] != NULL) na++;
  l->argv = rm__xcalloc(na + 1, sizeof *l->argv);
  for (size_t k = 0; k < na; k++) l->argv[k] = rm__xstrdup(argv[k]);
  free(argv);
  int started = 0;
  for (; started < l->n; started++)
    if ((st = start_worker(l, started, devnull, err, errlen)) != RM_OK) break;
  if (st != RM_OK) {
    kill_started(l, started);
    local_destroy(&l->base);
    goto out;
  }
  RM_INFO("job %s: started %d local worker(s) of %s, logs in %s", spec->job_id,
          l->n, path, spec->log_dir);
  *out = &l->base;
out:
  close(devnull);
  return st;
}

/* Record one wait status into w. */
static void note_exit(worker_t *w, int status)
{
  w->exited = 1;
  w->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  w->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void reap(local_t *l)
{
  for (int i = 0; i < l->n; i++) {
    worker_t *w = &l->w[i];
    int status = 0;
    if (w->exited) continue;
    pid_t r = waitpid(w->pid, &status, WNOHANG);
    if (r == w->pid) {
      note_exit(w, status);
    } else if (r < 0 && errno == ECHILD) {
      /* Someone else reaped it (SIGCHLD ignored?): the code is lost. */
      w->exited = 1;
      w->exit_code = -1;
      RM_WARN("worker pid %d was reaped elsewhere; exit status unknown", (int)w->pid);
    }
  }
}

static rm_status_t local_poll(rm__launch_t *base, rm_launch_state_t *state,
                              char *msg, size_t msglen)
{
  local_t *l = (local_t *)base;
  int alive = 0, failed = -1;
  reap(l);
  if (l->cancelled && !l->killed && rm__now_ns() >= l->kill_at_ns) {
    for (int i = 0; i < l->n; i++)
      if (!l->w[i].exited) kill(-l->w[i].pid, SIGKILL);
    l->killed = 1;
  }
  for (int i = 0; i < l->n; i++) {
    if (!l->w[i].exited) alive++;
    else if (failed < 0 && (l->w[i].exit_code != 0 || l->w[i].term_signal != 0))
      failed = i;
  }
  if (alive > 0) *state = l->cancelled ? RM_LAUNCH_CANCELLING : RM_LAUNCH_RUNNING;
  else if (l->cancelled) *state = RM_LAUNCH_CANCELLED;
  else if (failed >= 0) *state = RM_LAUNCH_FAILED;
  else *state = RM_LAUNCH_SUCCEEDED;
  if (failed >= 0 && msg != NULL) {
    const worker_t *w = &l->w[failed];
    if (w->term_signal != 0)
      snprintf(msg, msglen, "worker %d (pid %d) killed by signal %d (%s); log %s",
               failed, (int)w->pid, w->term_signal, strsignal(w->term_signal),
               w->log_path);
    else
      snprintf(msg, msglen, "worker %d (pid %d) exited with status %d; log %s",
               failed, (int)w->pid, w->exit_code, w->log_path);
  }
  return RM_OK;
}

static rm_status_t local_cancel(rm__launch_t *base, char *err, size_t errlen)
{
  local_t *l = (local_t *)base;
  if (l->cancelled) return RM_OK;
  reap(l);
  l->cancelled = 1;
  l->kill_at_ns = rm__now_ns() + (int64_t)l->grace_ms * 1000000LL;
  for (int i = 0; i < l->n; i++)
    if (!l->w[i].exited) kill(-l->w[i].pid, SIGTERM);
  return RM_OK;
}

static rm_status_t local_worker(rm__launch_t *base, int index, rm_launch_worker_t *out)
{
  local_t *l = (local_t *)base;
  if (index < 0 || index >= l->n) return RM_ERR_INVALID_ARG;
  const worker_t *w = &l->w[index];
  out->pid = w->pid;
  out->exited = w->exited;
  out->exit_code = w->exit_code;
  out->term_signal = w->term_signal;
  out->log_path = w->log_path;
  return RM_OK;
}

/* The equivalent shell script: one background command per worker. */
static rm_status_t local_render(const rm_launch_spec_t *spec, FILE *out, char *err,
                                size_t errlen)
{
  char path[4096];
  if (rm__launch_worker_path(spec, path, sizeof path, NULL, 0) != RM_OK)
    snprintf(path, sizeof path, "ringmaster-worker");
  char **argv = rm__launch_worker_argv(spec, path);
  const char *dir = spec->log_dir != NULL && *spec->log_dir ? spec->log_dir : ".";
  fprintf(out, "#!/bin/sh\n# ringmaster local launcher: job %s, %d worker(s)\n",
          spec->job_id, spec->world);
  for (int i = 0; i < spec->world; i++) {
    fprintf(out, "RINGMASTER_LAUNCH_INDEX=%d RINGMASTER_LAUNCH_WORLD=%d "
            "RINGMASTER_LOCAL_RANK=%d RINGMASTER_LOCAL_WORLD=%d", i, spec->world, i,
            spec->world);
    for (char **a = argv; *a != NULL; a++) {
      fputc(' ', out);
      rm__launch_shquote(out, *a);
    }
    fprintf(out, " >");
    rm__launch_shquote(out, dir);
    fprintf(out, "/worker-%d.log 2>&1 &\n", i);
  }
  fprintf(out, "wait\n");
  free(argv);
  return ferror(out) ? rm__launch_err(err, errlen, RM_ERR_SYSTEM, "write failed")
                     : RM_OK;
}

const rm__launcher_ops_t rm__launcher_local = {
    .name = "local",
    .start = local_start,
    .poll = local_poll,
    .cancel = local_cancel,
    .worker = local_worker,
    .add = local_add,
    .render = local_render,
    .destroy = local_destroy,
};
