/* launch_test_util.c - helpers for the launcher tests (see the header). */
#include "launch_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void lt_tmpdir(char *buf, size_t len, const char *tag)
{
  const char *t = getenv("TMPDIR");
  snprintf(buf, len, "%s/rm-%s-XXXXXX", t && *t ? t : "/tmp", tag);
  if (mkdtemp(buf) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
}

void lt_write(const char *path, const char *text, int mode)
{
  FILE *f = fopen(path, "w");
  if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
  chmod(path, (mode_t)mode);
}

char *lt_read(const char *path)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  size_t cap = 4096, n = 0;
  char *s = malloc(cap);
  size_t got;
  while (s != NULL && (got = fread(s + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (cap - n - 1 == 0) s = realloc(s, cap *= 2);
  }
  fclose(f);
  if (s != NULL) s[n] = '\0';
  return s;
}

int lt_file_has(const char *path, const char *needle)
{
  char *s = lt_read(path);
  int yes = s != NULL && strstr(s, needle) != NULL;
  if (!yes) fprintf(stderr, "  %s lacks '%s'; it holds:\n%s\n", path, needle, s ? s : "(none)");
  free(s);
  return yes;
}

int lt_count_fds(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n;
}

void lt_rmrf(const char *dir)
{
  pid_t pid = fork();
  if (pid == 0) {
    execlp("rm", "rm", "-rf", dir, (char *)NULL);
    _exit(127);
  }
  if (pid > 0) waitpid(pid, NULL, 0);
}

void lt_spec_init(rm_launch_spec_t *s, const char *dir, const char *sub,
                  const char *job_id, const char *worker, int world,
                  const char *const *extra)
{
  static char logdir[400];
  memset(s, 0, sizeof *s);
  snprintf(logdir, sizeof logdir, "%s/%s", dir, sub);
  s->job_id = job_id;
  s->token = "tok";
  s->coordinator = "127.0.0.1:7070";
  s->world = world;
  s->extra_args = extra;
  s->worker_path = worker;
  s->log_dir = logdir;
}
