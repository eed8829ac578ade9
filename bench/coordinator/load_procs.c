/*
 * load_procs.c - rm-coord-load's processes, from the parent: the
 * coordinator (`ringmaster serve`), the --real-relays relays, the submit
 * helper and the client processes; their CPU and memory read from /proc;
 * the parent's end of the pipe protocol (load_int.h: a command to every
 * client, then one result from each); and the cleanup on every exit path.
 *
 * Invariants: every process started here is in load_g as soon as it has
 * a pid, so the signal handler (cleanup_now, async-signal-safe) can kill
 * it by PID; each is also killed if the parent dies (PR_SET_PDEATHSIG);
 * every read from a child has a deadline.
 */
#define _GNU_SOURCE /* F_SETPIPE_SZ */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "load_parent_int.h"
#include "rm_clock.h"

struct load_procs load_g;

/* What `serve --db DIR/db` creates, for the signal path; the normal path
 * lists the directory. */
static const char *const dir_files[] = {"db",         "db-wal", "db-shm",
                                        "db-journal", "db.key", "serve.log"};

static void note_fd(int fd)
{
  if (fd > load_g.max_fd) load_g.max_fd = fd;
}

/* Async-signal-safe: kill by PID, unlink the known files, rmdir. */
void cleanup_now(void)
{
  char path[96];
  for (int i = 0; i < load_g.nprocs; i++)
    if (load_g.procs[i].pid > 0) kill(load_g.procs[i].pid, SIGKILL);
  if (load_g.coord > 0) kill(load_g.coord, SIGKILL);
  for (int i = 0; i < load_g.nrelays; i++)
    if (load_g.relays[i] > 0) kill(load_g.relays[i], SIGKILL);
  if (load_g.dir[0]) {
    for (int i = 0; i < load_g.nrelays; i++) /* rNN.sock, rNN.log */
      for (int k = 0; k < 2; k++) {
        size_t n = strlen(load_g.dir);
        memcpy(path, load_g.dir, n);
        memcpy(path + n, "/r", 2);
        n += 2;
        path[n++] = (char)('0' + i / 10);
        path[n++] = (char)('0' + i % 10);
        memcpy(path + n, k ? ".log" : ".sock", k ? 5 : 6);
        unlink(path);
      }
    for (size_t i = 0; i < sizeof dir_files / sizeof *dir_files; i++) {
      size_t n = strlen(load_g.dir);
      memcpy(path, load_g.dir, n);
      path[n] = '/';
      memcpy(path + n + 1, dir_files[i], strlen(dir_files[i]) + 1);
      unlink(path);
    }
    rmdir(load_g.dir);
  }
}

/* Not async-signal-safe: every file in the temp dir, then the dir. */
void remove_dir(void)
{
  char path[400];
  DIR *d = load_g.dir[0] ? opendir(load_g.dir) : NULL;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", load_g.dir, e->d_name);
      unlink(path);
    }
  if (d) closedir(d);
  cleanup_now();
  if (load_g.dir[0] && !access(load_g.dir, F_OK)) fprintf(stderr, "rm-coord-load: cannot remove %s\n", load_g.dir);
}

void on_signal(int sig)
{
  cleanup_now();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* waitpid with a deadline; SIGKILL (and reap) when it passes. */
void reap(pid_t pid, int grace_ms)
{
  int64_t dl = rm__now_ns() + (int64_t)grace_ms * 1000000;
  while (waitpid(pid, NULL, WNOHANG) == 0) {
    if (rm__now_ns() > dl) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      return;
    }
    usleep(10000);
  }
}

/* ---- the coordinator ---- */

usage_t coord_usage(pid_t pid)
{
  char path[64], buf[4096];
  usage_t u = {0, 0, 0};
  unsigned long ut = 0, st = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f && fgets(buf, sizeof buf, f)) {
    char *p = strrchr(buf, ')');
    if (p) sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
  }
  if (f) fclose(f);
  u.cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  while (f && fgets(buf, sizeof buf, f)) {
    if (!strncmp(buf, "VmHWM:", 6)) u.hwm_kb = atol(buf + 6);
    if (!strncmp(buf, "VmRSS:", 6)) u.rss_kb = atol(buf + 6);
  }
  if (f) fclose(f);
  return u;
}

/* ANONYMOUS: the coordinator's RssAnon and RssFile (kB), read with
 * open/read; 0 when it cannot be read. */
void coord_anon(pid_t pid, long *anon_kb, long *file_kb)
{
  char path[64], buf[4096];
  *anon_kb = *file_kb = 0;
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t len = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (len <= 0) return;
  buf[len] = 0;
  const char *p = strstr(buf, "RssAnon:"), *q = strstr(buf, "RssFile:");
  if (p) *anon_kb = atol(p + 8);
  if (q) *file_kb = atol(q + 8);
}

static struct {
  pthread_t th;
  int started;
  volatile int stop;
  long anon_peak_kb, file_peak_kb;
} sampler;

static void *sample_anon(void *arg)
{
  pid_t pid = *(pid_t *)arg;
  while (!sampler.stop) {
    long a, f;
    coord_anon(pid, &a, &f);
    if (a > sampler.anon_peak_kb) sampler.anon_peak_kb = a;
    if (f > sampler.file_peak_kb) sampler.file_peak_kb = f;
    usleep(5000);
  }
  return NULL;
}

void sampler_start(pid_t pid, long anon0, long file0)
{
  static pid_t sampled;
  sampled = pid;
  sampler.anon_peak_kb = anon0;
  sampler.file_peak_kb = file0;
  sampler.started = pthread_create(&sampler.th, NULL, sample_anon, &sampled) == 0;
}

void sampler_peaks(long *anon_kb, long *file_kb)
{
  *anon_kb = sampler.anon_peak_kb;
  *file_kb = sampler.file_peak_kb;
}

void sampler_stop(void)
{
  if (!sampler.started) return;
  sampler.stop = 1;
  pthread_join(sampler.th, NULL);
  sampler.started = 0;
}

/* CPU seconds of every client process so far. */
double clients_cpu(void)
{
  double t = 0;
  for (int k = 0; k < load_g.nprocs; k++)
    if (load_g.procs[k].pid > 0) t += coord_usage(load_g.procs[k].pid).cpu_s;
  return t;
}

/* Start argv (argv[0] the binary) with its stdout on a pipe (*out_fd: the
 * read end, kept open so it never gets EPIPE) and its stderr in log, killed
 * if this process dies; its pid, or -1. */
static pid_t spawn(char *const argv[], const char *log, int *out_fd)
{
  int fds[2];
  if (pipe(fds)) return -1;
  note_fd(fds[0]);
  note_fd(fds[1]);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fds[1], 1);
    if (lf >= 0) dup2(lf, 2);
    for (int fd = 3; fd <= load_g.max_fd + 1; fd++) close(fd);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  *out_fd = fds[0];
  return pid;
}

/* Read fd line by line (a byte at a time: the rest stays in the pipe) for
 * at most 30 s until a line starts with prefix; the rest of that line in
 * rest. 0 when found. */
static int await_line(int fd, const char *prefix, char *rest, size_t restlen)
{
  char line[256];
  int64_t dl = rm__now_ns() + 30 * 1000000000LL;
  size_t n = 0, pl = strlen(prefix);
  while (n + 1 < sizeof line && !load_read_full(fd, line + n, 1, dl)) {
    if (line[n] != '\n') {
      n++;
      continue;
    }
    line[n] = 0;
    if (!strncmp(line, prefix, pl)) {
      snprintf(rest, restlen, "%s", line + pl);
      return 0;
    }
    n = 0;
  }
  return -1;
}

/* Starts `ringmaster serve`; fills addr from its "listening" line. */
int start_coord(const char *bin, char *addr, size_t addrlen, int *out_fd)
{
  char db[96], log[96];
  snprintf(db, sizeof db, "%s/db", load_g.dir);
  snprintf(log, sizeof log, "%s/serve.log", load_g.dir);
  char *argv[] = {(char *)bin, "serve", "--db", db, "--grpc", "127.0.0.1:0", "--api-token",
                  LOAD_API_TOKEN, NULL};
  pid_t pid = spawn(argv, log, out_fd);
  if (pid < 0) return -1;
  load_g.coord = pid;
  fcntl(*out_fd, F_SETPIPE_SZ, 1 << 20);
  if (!await_line(*out_fd, "ringmaster: grpc listening on ", addr, addrlen) && addr[0])
    return 0;
  fprintf(stderr, "rm-coord-load: coordinator did not report its address (see %s)\n", log);
  return -1;
}

/* --real-relays: R `ringmaster relay` processes for the coordinator at
 * addr, on unix:DIR/rNN.sock (logs in DIR/rNN.log); each is ready once it
 * printed its "listening" line (at most 30 s). Their stdout pipes stay
 * open until the end (fds[i]). */
int start_relays(const char *bin, const char *addr, int r, int *fds)
{
  for (int i = 0; i < r; i++) {
    char sock[96], log[96], rest[160];
    snprintf(sock, sizeof sock, "%s/r%02d.sock", load_g.dir, i);
    snprintf(log, sizeof log, "%s/r%02d.log", load_g.dir, i);
    snprintf(load_g.relay_addr[i], sizeof load_g.relay_addr[i], "unix:%s", sock);
    char *argv[] = {(char *)bin, "relay", "--coordinator", (char *)addr, "--listen",
                    load_g.relay_addr[i], NULL};
    pid_t pid = spawn(argv, log, &fds[i]);
    if (pid < 0) return -1;
    load_g.relays[i] = pid;
    load_g.nrelays = i + 1;
    if (await_line(fds[i], "ringmaster: relay listening on", rest, sizeof rest)) {
      fprintf(stderr, "rm-coord-load: relay %d did not report listening (see %s)\n", i, log);
      return -1;
    }
  }
  return 0;
}

/* The submit helper process: job id and token of a job of world n. */
int submit(const char *addr, int n, int timeout_s, int gate, uint64_t *job,
                  char *tok, size_t toklen)
{
  int fds[2];
  char buf[160];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(fds[0]);
    _exit(load_submit_main(addr, n, timeout_s, gate, fds[1]));
  }
  close(fds[1]);
  int64_t dl = rm__now_ns() + (int64_t)(timeout_s + 10) * 1000000000LL;
  size_t len = 0;
  while (len + 1 < sizeof buf && !load_read_full(fds[0], buf + len, 1, dl) &&
         buf[len] != '\n')
    len++;
  buf[len] = 0;
  close(fds[0]);
  reap(pid, 5000);
  unsigned long long id;
  char fmt[32];
  snprintf(fmt, sizeof fmt, "%%llu %%%zus", toklen - 1);
  if (sscanf(buf, fmt, &id, tok) != 2) {
    fprintf(stderr, "rm-coord-load: SubmitJob failed\n");
    return -1;
  }
  *job = id;
  return 0;
}

/* ---- client processes ---- */

int fork_clients(const opts_t *o, load_client_cfg_t *base, int n, int procs)
{
  for (int k = 0; k < procs; k++) {
    int cmd[2], res[2];
    if (pipe(cmd) || pipe(res)) return -1;
    note_fd(cmd[0]);
    note_fd(cmd[1]);
    note_fd(res[0]);
    note_fd(res[1]);
    proc_t *p = &load_g.procs[k];
    p->lo = (int)((int64_t)n * k / procs);
    p->hi = (int)((int64_t)n * (k + 1) / procs);
    p->cmd_fd = cmd[1];
    p->res_fd = res[0];
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (int fd = 3; fd <= load_g.max_fd; fd++)
        if (fd != cmd[0] && fd != res[1]) close(fd);
      load_client_cfg_t cfg = *base;
      if (load_g.nrelays) cfg.addr = load_g.relay_addr[k % load_g.nrelays]; /* --real-relays */
      cfg.lo = p->lo;
      cfg.hi = p->hi;
      cfg.channels = o->channels ? o->channels : procs == 1 ? 8 : 4;
      if (cfg.channels > cfg.hi - cfg.lo) cfg.channels = cfg.hi - cfg.lo > 0 ? cfg.hi - cfg.lo : 1;
      cfg.cmd_fd = cmd[0];
      cfg.res_fd = res[1];
      _exit(load_client_main(&cfg));
    }
    p->pid = pid;
    load_g.nprocs = k + 1;
    close(cmd[0]);
    close(res[1]);
  }
  return 0;
}

static void client_gone(int k, const char *why, int kind)
{
  proc_t *p = &load_g.procs[k];
  int st = 0;
  pid_t w = p->pid > 0 ? waitpid(p->pid, &st, WNOHANG) : 0;
  fprintf(stderr, "rm-coord-load: client %d (pid %d, workers %d..%d) %s in phase %d\n", k,
          (int)p->pid, p->lo, p->hi - 1,
          w == p->pid && WIFSIGNALED(st) ? "was killed by a signal"
          : w == p->pid                  ? "exited"
                                         : why,
          kind);
  if (w == p->pid) p->pid = 0;
}

/* Client k's result, readable now: appended to ph (cap = the most
 * latencies one client may send). */
static int read_result(int k, int kind, size_t cap, int64_t dl, phase_t *ph, load_res_t *r)
{
  proc_t *p = &load_g.procs[k];
  if (load_read_full(p->res_fd, r, sizeof *r, dl) || r->kind != kind || r->n_lat < 0 ||
      (size_t)r->n_lat > cap || r->n_ranks < 0 || r->n_ranks > p->hi - p->lo ||
      load_read_full(p->res_fd, ph->lat + ph->n_lat, (size_t)r->n_lat * sizeof *ph->lat, dl) ||
      load_read_full(p->res_fd, ph->ranks + ph->n_ranks,
                     (size_t)r->n_ranks * sizeof *ph->ranks, dl)) {
    client_gone(k, errno == ETIMEDOUT ? "stopped answering (timeout)" : "broke the protocol",
                kind);
    return -1;
  }
  ph->n_lat += (size_t)r->n_lat;
  ph->n_ranks += (size_t)r->n_ranks;
  ph->n_ok += r->n_ok;
  ph->n_err += r->n_err;
  ph->n_bad += r->n_bad;
  ph->n_fast += r->n_fast;
  ph->n_gzip += r->n_gzip;
  ph->n_dropped += r->n_dropped;
  ph->n_late += r->n_late;
  ph->n_ended += r->n_ended;
  ph->n_rejoin += r->n_rejoin;
  ph->client_hwm_kb += r->hwm_kb;
  if (r->t_first && r->t_first < ph->t_first) ph->t_first = r->t_first;
  if (r->t_last > ph->t_last) ph->t_last = r->t_last;
  if (r->msg[0] && !ph->msg[0])
    snprintf(ph->msg, sizeof ph->msg, "client %d: %.*s", k, LOAD_MSG_MAX, r->msg);
  return 0;
}

/* Broadcast cmd (the start signal), then collect every client's result,
 * in whatever order they come: a client that dies (EOF) is reported at
 * once, not after the others' deadlines; none may take past wait_s. */
int run_phase(load_cmd_t cmd, int wait_s, size_t cap, phase_t *ph)
{
  struct pollfd pf[MAX_PROCS];
  int idx[MAX_PROCS], left = load_g.nprocs, have_gen = 0;
  uint64_t gen = 0, digest = 0;
  char done[MAX_PROCS] = {0};
  for (int k = 0; k < load_g.nprocs; k++)
    if (load_write_full(load_g.procs[k].cmd_fd, &cmd, sizeof cmd)) {
      client_gone(k, "is gone", cmd.kind);
      return -1;
    }
  int64_t dl = rm__now_ns() + (int64_t)wait_s * 1000000000LL;
  ph->t_first = INT64_MAX;
  while (left > 0) {
    int n = 0;
    for (int k = 0; k < load_g.nprocs; k++)
      if (!done[k]) {
        pf[n] = (struct pollfd){.fd = load_g.procs[k].res_fd, .events = POLLIN};
        idx[n++] = k;
      }
    int r = poll(pf, (nfds_t)n, rm__ms_left(dl));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      for (int i = 0; i < n; i++) client_gone(idx[i], "stopped answering (timeout)", cmd.kind);
      return -1;
    }
    for (int i = 0; i < n; i++) {
      if (!pf[i].revents) continue;
      load_res_t res;
      int k = idx[i];
      if (read_result(k, cmd.kind, cap, dl, ph, &res)) return -1;
      done[k] = 1;
      left--;
      if (cmd.kind == LOAD_CMD_JOIN && res.generation) {
        if (have_gen && (gen != res.generation || digest != res.peers_digest)) ph->mixed = 1;
        have_gen = 1;
        gen = res.generation;
        digest = res.peers_digest;
      }
    }
  }
  return 0;
}

/* graceful: QUIT and a grace period each; else (a failure) SIGKILL now. */
void quit_clients(int graceful)
{
  load_cmd_t q = {LOAD_CMD_QUIT, 0};
  for (int k = 0; k < load_g.nprocs; k++) {
    if (graceful) load_write_full(load_g.procs[k].cmd_fd, &q, sizeof q);
    else if (load_g.procs[k].pid > 0) kill(load_g.procs[k].pid, SIGKILL);
    close(load_g.procs[k].cmd_fd);
  }
  for (int k = 0; k < load_g.nprocs; k++) {
    if (load_g.procs[k].pid > 0) reap(load_g.procs[k].pid, 10000);
    load_g.procs[k].pid = 0;
    close(load_g.procs[k].res_fd);
  }
  load_g.nprocs = 0;
}
