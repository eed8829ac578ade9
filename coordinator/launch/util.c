/*
 * util.c - helpers shared by the launchers.
 *
 * rm__launch_run() is a small popen3 with a deadline:
 *   fork; child: stdin </dev/null, stdout -> pipe A, stderr -> pipe B, and an
 *   O_CLOEXEC "exec failed" pipe C carrying errno if execvp fails;
 *   parent: poll(A, B) until both hit EOF or the deadline; then read C
 *   (EOF = exec succeeded), then waitpid. On deadline: SIGKILL, reap,
 *   RM_ERR_TIMEOUT. Output beyond the buffers is read and dropped so the
 *   child never blocks on a full pipe.
 */
#define _GNU_SOURCE
#include "launch_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_fs.h"

/* The folders of worker logs are owner-only (0700): a log carries what a
 * job's program prints. Only the folders made here are narrowed (the job's
 * folder and the serve --log-dir above it); one that already existed is
 * the user's, and serve warns when it is wider (docs/security.md). */
rm_status_t rm__launch_mkdir_p(const char *path, char *err, size_t errlen)
{
  char why[512], parent[4096];
  struct stat st;
  const char *slash = strrchr(path, '/');
  size_t pl = slash && slash > path ? (size_t)(slash - path) : 0;
  int had = stat(path, &st) == 0, had_parent = 1;
  if (pl && pl < sizeof parent) {
    memcpy(parent, path, pl);
    parent[pl] = '\0';
    had_parent = stat(parent, &st) == 0;
  }
  if (rm__mkdir_p(path, why, sizeof why) != 0)
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "log_dir: %s", why);
  if (!had_parent) (void)chmod(parent, 0700);
  if (!had) (void)chmod(path, 0700);
  return RM_OK;
}

void rm__launch_shquote(FILE *f, const char *s)
{
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputs("'\\''", f);
    else fputc(*s, f);
  }
  fputc('\'', f);
}

char *rm__launch_rtrim(char *s)
{
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' ||
                   s[n - 1] == '\t'))
    s[--n] = '\0';
  return s;
}

char **rm__launch_worker_argv(const rm_launch_spec_t *spec, const char *worker)
{
  size_t extra = 0, i = 0;
  while (spec->extra_args != NULL && spec->extra_args[extra] != NULL) extra++;
  char **argv = rm__xcalloc(12 + extra, sizeof *argv);
  argv[i++] = (char *)worker;
  argv[i++] = "--coordinator";
  argv[i++] = (char *)spec->coordinator;
  argv[i++] = "--job";
  argv[i++] = (char *)spec->job_id;
  argv[i++] = "--token";
  argv[i++] = (char *)spec->token;
  if (spec->workload != NULL && *spec->workload != '\0') {
    argv[i++] = "--workload";
    argv[i++] = (char *)spec->workload;
  }
  for (size_t k = 0; k < extra; k++) argv[i++] = (char *)spec->extra_args[k];
  argv[i] = NULL;
  return argv;
}

/* Child side of rm__launch_run: only async-signal-safe calls. */
static void run_child(const char *const *argv, int out_w, int err_w, int fail_w)
{
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
    goto fail;
  execvp(argv[0], (char *const *)argv);
fail:;
  int e = errno;
  if (write(fail_w, &e, sizeof e) < 0) _exit(127);
  _exit(127);
}

/* Append what fd has to buf (keeping it NUL-terminated); 0 at EOF. */
static int drain(int fd, char *buf, size_t cap, size_t *len)
{
  char tmp[1024];
  ssize_t n = read(fd, tmp, sizeof tmp);
  if (n < 0) return errno == EINTR || errno == EAGAIN ? 1 : 0;
  if (n == 0) return 0;
  size_t room = cap - 1 - *len;
  size_t k = (size_t)n < room ? (size_t)n : room;
  memcpy(buf + *len, tmp, k);
  *len += k;
  buf[*len] = '\0';
  return 1;
}

static rm_status_t collect(pid_t pid, int out_r, int err_r, int timeout_ms,
                           rm__launch_cmd_t *res)
{
  int64_t deadline = rm__now_ns() + (int64_t)timeout_ms * 1000000LL;
  size_t olen = 0, elen = 0;
  struct pollfd p[2] = {{out_r, POLLIN, 0}, {err_r, POLLIN, 0}};
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    int left = rm__ms_left(deadline);
    if (left == 0) {
      kill(pid, SIGKILL);
      return RM_ERR_TIMEOUT;
    }
    int n = poll(p, 2, left);
    if (n < 0 && errno != EINTR) return RM_ERR_SYSTEM;
    if (p[0].fd >= 0 && p[0].revents &&
        !drain(p[0].fd, res->out, sizeof res->out, &olen))
      p[0].fd = -1;
    if (p[1].fd >= 0 && p[1].revents &&
        !drain(p[1].fd, res->errout, sizeof res->errout, &elen))
      p[1].fd = -1;
  }
  return RM_OK;
}

rm_status_t rm__launch_run(const char *const *argv, int timeout_ms,
                           rm__launch_cmd_t *res, char *err, size_t errlen)
{
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, pf[2] = {-1, -1};
  rm_status_t st = RM_OK;
  int status = 0, child_errno = 0;
  memset(res, 0, sizeof *res);
  if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || pipe2(pf, O_CLOEXEC)) {
    st = rm__launch_err(err, errlen, RM_ERR_SYSTEM, "pipe: %s", strerror(errno));
    goto out;
  }
  pid_t pid = fork();
  if (pid < 0) {
    st = rm__launch_err(err, errlen, RM_ERR_SYSTEM, "fork: %s", strerror(errno));
    goto out;
  }
  if (pid == 0) run_child(argv, po[1], pe[1], pf[1]);
  close(po[1]), close(pe[1]), close(pf[1]);
  po[1] = pe[1] = pf[1] = -1;
  st = collect(pid, po[0], pe[0], timeout_ms, res);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (st == RM_ERR_TIMEOUT) {
    rm__launch_err(err, errlen, st, "%s: no answer within %d ms", argv[0], timeout_ms);
    goto out;
  }
  if (st != RM_OK) {
    rm__launch_err(err, errlen, st, "%s: poll: %s", argv[0], strerror(errno));
    goto out;
  }
  if (read(pf[0], &child_errno, sizeof child_errno) == (ssize_t)sizeof child_errno) {
    st = rm__launch_err(err, errlen, RM_ERR_NOT_FOUND, "cannot run %s: %s", argv[0],
                        strerror(child_errno));
    goto out;
  }
  res->exited = WIFEXITED(status);
  res->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  res->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
out:
  for (int i = 0; i < 2; i++) {
    if (po[i] >= 0) close(po[i]);
    if (pe[i] >= 0) close(pe[i]);
    if (pf[i] >= 0) close(pf[i]);
  }
  return st;
}
