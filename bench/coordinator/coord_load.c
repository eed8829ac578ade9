/*
 * coord_load.c - load generator for the coordinator (benchmark, not a test).
 *
 *   rm-coord-load --ringmaster PATH [--workers N ...] [--rounds R]
 *                 [--procs P] [--channels C] [--heartbeat-s S] [--timeout-s T]
 *                 [--gzip 0|1] [--gate-steps K] [--session 0|1|2] [--relay K]
 *                 [--real-relays R]
 *
 * For each N: starts a fresh `ringmaster serve` (temp db, port 0), submits a
 * job of world N (launcher none), and simulates its N workers from P client
 * processes (default ceil(N / 2048)), each with C channels (TCP connections;
 * default 8 for one process, else 4) and its share of the workers
 * (load_client.c; the pipe protocol is in load_int.h).  Phases, each started
 * in every client at once by the parent:
 *   1. Join wave: join time = first Join sent -> last "formed" answer.
 *   2. R barrier rounds: a call's latency = its send -> its answer; p50 / p99
 *      / max over all N*R calls; round = first send -> last answer.
 *   3. --gate-steps K (default 0): the job has straggler_policy backup with
 *      one backup worker, and after the barriers every worker calls
 *      StepGate(step k, ready) at once for k < K: p50 / p99 / max over the
 *      N*K calls; each step must drop exactly one worker.  With --session
 *      1 the calls are messages on the Sessions, answered on them (the
 *      ranks out of the step, not a mask: load_client.c SESSION BARRIERS
 *      AND GATES).
 *   4. Heartbeats: every worker at 1 Hz for S s (spread over each second);
 *      the coordinator's CPU during the phase as % of one core.
 * --session 1 (default): right after the Join wave every worker opens its
 * Session stream and holds it through phases 2-4 (so the peak RSS includes
 * them); its barrier arrivals are messages on it, each answered by a message
 * on it at the release (latency: send start -> answer received), and its
 * heartbeats too (latency: send start -> send completion, nothing is
 * answered), instead of unary Barrier and Heartbeat calls; at the
 * end every worker half-closes it and each must end with status OK and no
 * message but its barrier answers (load_client.c SESSIONS).  --session 0:
 * unary barriers and heartbeats, no streams.  --session 2 (the worker
 * library before the Session RPC): right after the Join wave every worker
 * opens a Watch call (its request asks for no event) and holds it through
 * phases 2-4, barriers and heartbeats are the unary calls of --session 0,
 * and at the end every worker cancels its Watch; each must
 * end CANCELLED (or OK: the coordinator fails the job at the first
 * cancelled Watch and ends the rest) with no message (load_client.c
 * WATCHES).
 * --relay K (with --session 1; default 0 = none): the workers' Join calls
 * and Sessions are the lanes of relay streams, K workers a relay, as a
 * relay on each host carries them (service.proto Relay; load_relay.c): one
 * RelayRequest a relay for its lanes' Joins, openings, arrivals and gate
 * calls; heartbeats batched per relay (at most 100 ms late); each lane's
 * answers checked as a unary Join's or a Session's.
 * --real-relays R (with --session 1 and --relay 0): R real `ringmaster
 * relay` processes (relay/relay.c) on unix sockets in the temp dir, and
 * client process k's channels go to relay k % R instead of the
 * coordinator: every call of its workers (Join and Session, the only ones
 * in this mode) goes through a real relay, which carries them to the
 * coordinator as lanes, as rack relays would. The relays' peak RSS and CPU
 * are reported beside the coordinator's.
 * --gzip 0: the workers do not ask for gzip Join or StepGate answers (an
 * older worker; load_client.c GZIP).  The clients' CPU per phase is
 * reported beside the coordinator's (all share the machine's cores).
 * Coordinator CPU is utime+stime from /proc/PID/stat, RSS from
 * /proc/PID/status: the base (VmRSS with the job submitted, before any Join)
 * and the peak (VmHWM); per worker = (peak - base) / N. That total counts
 * file-backed pages too (code the run touches for the first time, which
 * no worker owns), so the ANONYMOUS part is reported as well: RssAnon sampled every 5 ms from the clients' start to
 * the end by a thread of this process (open/read, no stdio: nothing it
 * holds can be inherited by a fork), per worker = (its peak - its value at
 * the base) / N, and the file-backed pages' growth beside it.
 *
 * Every answer is checked (load_client.c); failures are counted and printed
 * and make the exit status 1.  Cleanup: the coordinator and every client are
 * killed by PID on every exit path (and get SIGKILL if this process dies:
 * PR_SET_PDEATHSIG), the temp dir is removed file by file.
 */
#define _GNU_SOURCE /* F_SETPIPE_SZ */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "load_int.h"
#include "rm_clock.h"

#define MAX_SIZES 8
#define WORKERS_PER_PROC 2048
#define MAX_PROCS 256
#define MAX_RELAYS 64

typedef struct {
  const char *bin;
  int counts[MAX_SIZES], nc, rounds, procs, channels, heartbeat_s, timeout_s, gzip, gate;
  int relay;   /* > 0: Sessions are lanes of relay streams of this many */
  int real_relays; /* > 0: this many `ringmaster relay` processes carry them */
  int session; /* 1: Session streams carry the barrier arrivals and answers and the
                * heartbeats (load_client.c SESSIONS, SESSION BARRIERS);
                * 2: a Watch per worker, unary heartbeats (load_client.c WATCHES) */
} opts_t;

typedef struct {
  pid_t pid;
  int cmd_fd, res_fd, lo, hi;
} proc_t;

/* Everything to undo, reachable from the signal handler. */
static struct {
  volatile pid_t coord;
  volatile int nprocs;
  proc_t procs[MAX_PROCS];
  char dir[64];
  int max_fd;
  volatile int nrelays;
  pid_t relays[MAX_RELAYS];      /* --real-relays */
  char relay_addr[MAX_RELAYS][112];
} g;

/* What `serve --db DIR/db` creates, for the signal path; the normal path
 * lists the directory. */
static const char *const dir_files[] = {"db",         "db-wal", "db-shm",
                                        "db-journal", "db.key", "serve.log"};

static void note_fd(int fd)
{
  if (fd > g.max_fd) g.max_fd = fd;
}

/* Async-signal-safe: kill by PID, unlink the known files, rmdir. */
static void cleanup_now(void)
{
  char path[96];
  for (int i = 0; i < g.nprocs; i++)
    if (g.procs[i].pid > 0) kill(g.procs[i].pid, SIGKILL);
  if (g.coord > 0) kill(g.coord, SIGKILL);
  for (int i = 0; i < g.nrelays; i++)
    if (g.relays[i] > 0) kill(g.relays[i], SIGKILL);
  if (g.dir[0]) {
    for (int i = 0; i < g.nrelays; i++) /* rNN.sock, rNN.log */
      for (int k = 0; k < 2; k++) {
        size_t n = strlen(g.dir);
        memcpy(path, g.dir, n);
        memcpy(path + n, "/r", 2);
        n += 2;
        path[n++] = (char)('0' + i / 10);
        path[n++] = (char)('0' + i % 10);
        memcpy(path + n, k ? ".log" : ".sock", k ? 5 : 6);
        unlink(path);
      }
    for (size_t i = 0; i < sizeof dir_files / sizeof *dir_files; i++) {
      size_t n = strlen(g.dir);
      memcpy(path, g.dir, n);
      path[n] = '/';
      memcpy(path + n + 1, dir_files[i], strlen(dir_files[i]) + 1);
      unlink(path);
    }
    rmdir(g.dir);
  }
}

/* Not async-signal-safe: every file in the temp dir, then the dir. */
static void remove_dir(void)
{
  char path[400];
  DIR *d = g.dir[0] ? opendir(g.dir) : NULL;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", g.dir, e->d_name);
      unlink(path);
    }
  if (d) closedir(d);
  cleanup_now();
  if (g.dir[0] && !access(g.dir, F_OK)) fprintf(stderr, "rm-coord-load: cannot remove %s\n", g.dir);
}

static void on_signal(int sig)
{
  cleanup_now();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* waitpid with a deadline; SIGKILL (and reap) when it passes. */
static void reap(pid_t pid, int grace_ms)
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

typedef struct {
  double cpu_s;
  long rss_kb, hwm_kb;
} usage_t;

static usage_t coord_usage(pid_t pid)
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
static void coord_anon(pid_t pid, long *anon_kb, long *file_kb)
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

static void sampler_stop(void)
{
  if (!sampler.started) return;
  sampler.stop = 1;
  pthread_join(sampler.th, NULL);
  sampler.started = 0;
}

/* CPU seconds of every client process so far. */
static double clients_cpu(void)
{
  double t = 0;
  for (int k = 0; k < g.nprocs; k++)
    if (g.procs[k].pid > 0) t += coord_usage(g.procs[k].pid).cpu_s;
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
    for (int fd = 3; fd <= g.max_fd + 1; fd++) close(fd);
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
static int start_coord(const char *bin, char *addr, size_t addrlen, int *out_fd)
{
  char db[96], log[96];
  snprintf(db, sizeof db, "%s/db", g.dir);
  snprintf(log, sizeof log, "%s/serve.log", g.dir);
  char *argv[] = {(char *)bin, "serve", "--db", db, "--grpc", "127.0.0.1:0", "--api-token",
                  LOAD_API_TOKEN, NULL};
  pid_t pid = spawn(argv, log, out_fd);
  if (pid < 0) return -1;
  g.coord = pid;
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
static int start_relays(const char *bin, const char *addr, int r, int *fds)
{
  for (int i = 0; i < r; i++) {
    char sock[96], log[96], rest[160];
    snprintf(sock, sizeof sock, "%s/r%02d.sock", g.dir, i);
    snprintf(log, sizeof log, "%s/r%02d.log", g.dir, i);
    snprintf(g.relay_addr[i], sizeof g.relay_addr[i], "unix:%s", sock);
    char *argv[] = {(char *)bin, "relay", "--coordinator", (char *)addr, "--listen",
                    g.relay_addr[i], NULL};
    pid_t pid = spawn(argv, log, &fds[i]);
    if (pid < 0) return -1;
    g.relays[i] = pid;
    g.nrelays = i + 1;
    if (await_line(fds[i], "ringmaster: relay listening on", rest, sizeof rest)) {
      fprintf(stderr, "rm-coord-load: relay %d did not report listening (see %s)\n", i, log);
      return -1;
    }
  }
  return 0;
}

/* The submit helper process: job id and token of a job of world n. */
static int submit(const char *addr, int n, int timeout_s, int gate, uint64_t *job,
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

static int fork_clients(const opts_t *o, load_client_cfg_t *base, int n, int procs)
{
  for (int k = 0; k < procs; k++) {
    int cmd[2], res[2];
    if (pipe(cmd) || pipe(res)) return -1;
    note_fd(cmd[0]);
    note_fd(cmd[1]);
    note_fd(res[0]);
    note_fd(res[1]);
    proc_t *p = &g.procs[k];
    p->lo = (int)((int64_t)n * k / procs);
    p->hi = (int)((int64_t)n * (k + 1) / procs);
    p->cmd_fd = cmd[1];
    p->res_fd = res[0];
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (int fd = 3; fd <= g.max_fd; fd++)
        if (fd != cmd[0] && fd != res[1]) close(fd);
      load_client_cfg_t cfg = *base;
      if (g.nrelays) cfg.addr = g.relay_addr[k % g.nrelays]; /* --real-relays */
      cfg.lo = p->lo;
      cfg.hi = p->hi;
      cfg.channels = o->channels ? o->channels : procs == 1 ? 8 : 4;
      if (cfg.channels > cfg.hi - cfg.lo) cfg.channels = cfg.hi - cfg.lo > 0 ? cfg.hi - cfg.lo : 1;
      cfg.cmd_fd = cmd[0];
      cfg.res_fd = res[1];
      _exit(load_client_main(&cfg));
    }
    p->pid = pid;
    g.nprocs = k + 1;
    close(cmd[0]);
    close(res[1]);
  }
  return 0;
}

typedef struct {
  int64_t t_first, t_last;
  int n_ok, n_err, n_bad, n_fast, n_rejoin, n_gzip, n_dropped, n_late, n_ended;
  int64_t *lat;     /* all clients' latencies */
  size_t n_lat;
  uint32_t *ranks;  /* JOIN */
  size_t n_ranks;
  int mixed;        /* JOIN: generation / peer digest differ between clients */
  int64_t client_hwm_kb;
  char msg[LOAD_MSG_MAX + 64];
} phase_t;

static void client_gone(int k, const char *why, int kind)
{
  proc_t *p = &g.procs[k];
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
  proc_t *p = &g.procs[k];
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
static int run_phase(load_cmd_t cmd, int wait_s, size_t cap, phase_t *ph)
{
  struct pollfd pf[MAX_PROCS];
  int idx[MAX_PROCS], left = g.nprocs, have_gen = 0;
  uint64_t gen = 0, digest = 0;
  char done[MAX_PROCS] = {0};
  for (int k = 0; k < g.nprocs; k++)
    if (load_write_full(g.procs[k].cmd_fd, &cmd, sizeof cmd)) {
      client_gone(k, "is gone", cmd.kind);
      return -1;
    }
  int64_t dl = rm__now_ns() + (int64_t)wait_s * 1000000000LL;
  ph->t_first = INT64_MAX;
  while (left > 0) {
    int n = 0;
    for (int k = 0; k < g.nprocs; k++)
      if (!done[k]) {
        pf[n] = (struct pollfd){.fd = g.procs[k].res_fd, .events = POLLIN};
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

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_ms(const int64_t *sorted, size_t n, int pct)
{
  if (!n) return 0;
  size_t i = n * (size_t)pct / 100;
  return (double)sorted[i < n ? i : n - 1] / 1e6;
}

/* Ranks of all N answers are a permutation of 0..N-1. */
static int ranks_ok(const uint32_t *r, size_t nr, int n)
{
  if (nr != (size_t)n) return 0;
  unsigned char *seen = calloc((size_t)n, 1);
  int ok = seen != NULL;
  for (size_t i = 0; ok && i < nr; i++) {
    if (r[i] >= (uint32_t)n || seen[r[i]]) ok = 0;
    else seen[r[i]] = 1;
  }
  free(seen);
  return ok;
}

static int phase_failures(const char *what, const phase_t *ph)
{
  int f = ph->n_err + ph->n_bad;
  if (f) fprintf(stderr, "rm-coord-load: %s: %d errors, %d bad answers; first: %s\n", what,
                 ph->n_err, ph->n_bad, ph->msg);
  return f;
}

/* ---- one world size ---- */

typedef struct {
  double join_s, p50, p99, max, round_ms, hb_pct, hb_p99, cpu_s, cpu_join, cpu_bar;
  double hwm_mib, base_mib, end_mib, per_worker_b, client_mib;
  double anon_base_mib, anon_peak_mib, anon_per_worker_b, file_growth_mib;
  double relay_mib, relay_cpu_s; /* --real-relays: peak RSS (sum), CPU (sum) */
  double cli_join, cli_bar, cli_hb_pct, load0, load1, hb_us;
  double g50, g99, gmax, cpu_gate, cli_gate; /* StepGate steps (--gate-steps) */
  double open_ms, close_ms;                  /* --session 1, 2: first send -> last */
  int failures, fast, gzip, gate_gzip, gate_dropped, hb_late, hb_beats, closed_ok;
  int closed;                                /* --session 1, 2: the close phase ran */
  int ended;                                 /* --session 2: Watches ended OK, not CANCELLED */
} result_t;

/* Phase bounds on CLOCK_MONOTONIC (what rm__now_ns reads), for slicing a
 * profile of the coordinator: perf record -k CLOCK_MONOTONIC ..., then
 * perf report --time START,END with these seconds. */
static void mark(const char *what, int64_t t0, int64_t t1)
{
  fprintf(stderr, "rm-coord-load: phase %s: %.6f,%.6f (CLOCK_MONOTONIC s)\n", what,
          (double)t0 / 1e9, (double)t1 / 1e9);
}

/* SESSIONS: the OPEN or CLOSE command in every client, as phase
 * "<what> <verb>" (its bounds marked; its latencies and ranks in ph's
 * buffers). 0, or -1 when a client failed (the run ends). */
static int stream_phase(int kind, int wait_s, size_t per, const phase_t *ph, const char *what,
                        const char *verb, phase_t *p, char *name, size_t namelen)
{
  memset(p, 0, sizeof *p);
  p->lat = ph->lat;
  p->ranks = ph->ranks;
  snprintf(name, namelen, "%s %s", what, verb);
  if (run_phase((load_cmd_t){kind, 0}, wait_s, per, p)) return -1;
  mark(name, p->t_first, p->t_last);
  return 0;
}

/* SESSIONS: its failures count, and every one of the n streams must have
 * come through it (`did`: what each should have done). */
static void stream_verdict(const char *name, const phase_t *p, int n, const char *did,
                           result_t *out)
{
  out->failures += phase_failures(name, p);
  if (!out->failures && p->n_ok != n) {
    fprintf(stderr, "rm-coord-load: %s: %d of %d %s\n", name, p->n_ok, n, did);
    out->failures++;
  }
}

static int run_phases(const opts_t *o, int n, size_t per, result_t *out)
{
  phase_t ph;
  load_cmd_t cmd = {LOAD_CMD_JOIN, 0};
  int wait_s = o->timeout_s + 90, rc = -1;
  size_t hb_cap = per * (size_t)o->heartbeat_s;
  size_t bar_cap = (size_t)n * (size_t)(o->rounds > o->gate ? o->rounds : o->gate);
  size_t cap = bar_cap > (size_t)n * (size_t)o->heartbeat_s ? bar_cap
                                                            : (size_t)n * (size_t)o->heartbeat_s;
  memset(&ph, 0, sizeof ph);
  ph.lat = calloc(cap + (size_t)n, sizeof *ph.lat);
  ph.ranks = calloc((size_t)n, sizeof *ph.ranks);
  if (!ph.lat || !ph.ranks) goto out;
  usage_t u0 = coord_usage(g.coord);
  double k0 = clients_cpu();
  if (run_phase(cmd, wait_s, per, &ph)) goto out;
  usage_t u1 = coord_usage(g.coord);
  double k1 = clients_cpu();
  out->join_s = (double)(ph.t_last - ph.t_first) / 1e9;
  out->cpu_join = u1.cpu_s - u0.cpu_s;
  out->cli_join = k1 - k0;
  out->fast = ph.n_fast;
  out->gzip = ph.n_gzip;
  mark("join", ph.t_first, ph.t_last);
  fprintf(stderr, "rm-coord-load: join: %.2f s; %d answers checked (%d gzip), %d by "
          "byte-compare with the verified first one, %d unpacked; coordinator cpu %.2f s, "
          "clients %.2f s; coordinator rss %.1f MiB (peak %.1f)\n", out->join_s,
          ph.n_ok + ph.n_bad, ph.n_gzip, ph.n_fast, ph.n_ok + ph.n_bad - ph.n_fast,
          out->cpu_join, out->cli_join, (double)u1.rss_kb / 1024, (double)u1.hwm_kb / 1024);
  out->failures += phase_failures("join", &ph);
  if (ph.n_rejoin) fprintf(stderr, "rm-coord-load: %d Join answers said not formed yet\n",
                           ph.n_rejoin);
  if (!ranks_ok(ph.ranks, ph.n_ranks, n) || ph.mixed) {
    fprintf(stderr, "rm-coord-load: join: %s\n",
            ph.mixed ? "clients saw different generations or peer lists"
                     : "the answers' ranks are not each rank 0..N-1 once");
    out->failures++;
  }
  if (out->failures) goto done;
  /* SESSIONS: every worker opens its stream (WATCHES: its Watch), held to the end */
  const char *what = o->session == 2 ? "watch" : "session";
  if (o->session) {
    phase_t po;
    char ph_name[32];
    usage_t s0 = coord_usage(g.coord);
    if (stream_phase(LOAD_CMD_OPEN, wait_s, per, &ph, what, "open", &po, ph_name,
                     sizeof ph_name))
      goto out;
    out->open_ms = (double)(po.t_last - po.t_first) / 1e6;
    usage_t s1 = coord_usage(g.coord);
    fprintf(stderr, "rm-coord-load: %s: %d opened (%s sent) in %.1f ms; "
            "coordinator cpu %.2f s; rss %.1f MiB (peak %.1f)\n",
            o->session == 2 ? "watches" : "sessions", po.n_ok,
            o->session == 2 ? "request" : "first message", out->open_ms,
            s1.cpu_s - s0.cpu_s, (double)s1.rss_kb / 1024, (double)s1.hwm_kb / 1024);
    stream_verdict(ph_name, &po, n, "sent", out);
    if (out->failures) goto done;
    u1 = coord_usage(g.coord); /* the barrier phase's CPU starts here */
    k1 = clients_cpu();
  }
  /* barriers */
  int64_t *bar = ph.lat;
  phase_t pb;
  memset(&pb, 0, sizeof pb);
  pb.lat = bar;
  pb.ranks = ph.ranks;
  double round_sum = 0;
  int64_t bar_t0 = 0, bar_t1 = 0;
  for (int k = 0; k < o->rounds; k++) {
    phase_t one = pb;
    one.t_first = one.t_last = 0;
    cmd = (load_cmd_t){LOAD_CMD_BARRIER, k};
    if (run_phase(cmd, wait_s, per, &one)) goto out;
    round_sum += (double)(one.t_last - one.t_first) / 1e6;
    if (!k) bar_t0 = one.t_first;
    bar_t1 = one.t_last;
    out->failures += phase_failures("barrier", &one);
    pb.n_lat = one.n_lat;
    if (out->failures) goto done;
  }
  usage_t ub = coord_usage(g.coord);
  out->cpu_bar = ub.cpu_s - u1.cpu_s;
  out->cli_bar = clients_cpu() - k1;
  mark("barriers", bar_t0, bar_t1);
  fprintf(stderr, "rm-coord-load: after the barriers (%s): coordinator rss %.1f MiB "
          "(peak %.1f)\n", o->session == 1 ? "arrivals and answers on the Sessions"
                                             : "unary Barrier calls",
          (double)ub.rss_kb / 1024, (double)ub.hwm_kb / 1024);
  qsort(bar, pb.n_lat, sizeof *bar, cmp_i64);
  out->p50 = pct_ms(bar, pb.n_lat, 50);
  out->p99 = pct_ms(bar, pb.n_lat, 99);
  out->max = pct_ms(bar, pb.n_lat, 100);
  out->round_ms = round_sum / o->rounds;
  /* StepGate steps: each releases N - 1 members and drops one */
  if (o->gate > 0) {
    phase_t pg;
    memset(&pg, 0, sizeof pg);
    pg.lat = bar;
    pg.ranks = ph.ranks;
    usage_t g0 = coord_usage(g.coord);
    double gk0 = clients_cpu();
    int64_t gt0 = 0, gt1 = 0;
    for (int k = 0; k < o->gate; k++) {
      phase_t one = pg;
      one.t_first = one.t_last = 0;
      cmd = (load_cmd_t){LOAD_CMD_GATE, k};
      if (run_phase(cmd, wait_s, per, &one)) goto out;
      if (!k) gt0 = one.t_first;
      gt1 = one.t_last;
      out->failures += phase_failures("step gate", &one);
      if (!out->failures && one.n_dropped != 1) {
        fprintf(stderr, "rm-coord-load: step %d: %d workers dropped, want 1\n", k, one.n_dropped);
        out->failures++;
      }
      pg.n_lat = one.n_lat;
      pg.n_gzip = one.n_gzip;
      out->gate_dropped += one.n_dropped;
      out->gate_gzip = pg.n_gzip;
      if (out->failures) goto done;
    }
    out->cpu_gate = coord_usage(g.coord).cpu_s - g0.cpu_s;
    out->cli_gate = clients_cpu() - gk0;
    mark("gate", gt0, gt1);
    qsort(bar, pg.n_lat, sizeof *bar, cmp_i64);
    out->g50 = pct_ms(bar, pg.n_lat, 50);
    out->g99 = pct_ms(bar, pg.n_lat, 99);
    out->gmax = pct_ms(bar, pg.n_lat, 100);
    fprintf(stderr, "rm-coord-load: step gate: %d steps, p50 %.2f p99 %.2f max %.2f ms; "
            "coordinator cpu %.2f s, clients %.2f s; %d gzip answers\n", o->gate, out->g50,
            out->g99, out->gmax, out->cpu_gate, out->cli_gate, pg.n_gzip);
  }
  /* heartbeats */
  if (o->heartbeat_s > 0) {
    phase_t hb;
    memset(&hb, 0, sizeof hb);
    hb.lat = ph.lat;
    hb.ranks = ph.ranks;
    usage_t h0 = coord_usage(g.coord);
    double hk0 = clients_cpu();
    int64_t w0 = rm__now_ns();
    cmd = (load_cmd_t){LOAD_CMD_HEARTBEAT, o->heartbeat_s};
    if (run_phase(cmd, o->heartbeat_s + 60, hb_cap, &hb)) goto out;
    double wall = (double)(rm__now_ns() - w0) / 1e9;
    mark("heartbeats", w0, rm__now_ns());
    double hb_cpu = coord_usage(g.coord).cpu_s - h0.cpu_s;
    out->hb_pct = 100.0 * hb_cpu / wall;
    /* per answered heartbeat (session: per message sent): when the clients
     * fall behind, fewer than N a second reach the coordinator and hb_pct
     * understates N at 1 Hz */
    out->hb_beats = o->session == 1 ? hb.n_ok : hb.n_ok + hb.n_bad;
    out->hb_us = out->hb_beats ? hb_cpu * 1e6 / out->hb_beats : 0;
    out->hb_late = hb.n_late;
    out->cli_hb_pct = 100.0 * (clients_cpu() - hk0) / wall;
    qsort(hb.lat, hb.n_lat, sizeof *hb.lat, cmp_i64);
    out->hb_p99 = pct_ms(hb.lat, hb.n_lat, 99);
    out->failures += phase_failures("heartbeat", &hb);
    out->client_mib = (double)hb.client_hwm_kb / 1024;
  }
  /* SESSIONS: every worker half-closes; each stream must end OK, no message
   * (WATCHES: every worker cancels its Watch; each must end CANCELLED, or OK
   * when the coordinator ended it first, no message). What the coordinator
   * does after this (workers lost, the job failed) is not checked. */
  if (o->session && !out->failures) {
    phase_t pc;
    char ph_name[32];
    usage_t before = coord_usage(g.coord);
    if (stream_phase(LOAD_CMD_CLOSE, 60, per, &ph, what, "close", &pc, ph_name,
                     sizeof ph_name))
      goto out;
    out->close_ms = (double)(pc.t_last - pc.t_first) / 1e6;
    out->closed_ok = pc.n_ok;
    out->ended = pc.n_ended;
    out->closed = 1;
    if (o->session == 2)
      fprintf(stderr, "rm-coord-load: watches: %d of %d ended as they should after the cancel "
              "in %.1f ms (%d CANCELLED, %d OK: the coordinator ended them first); "
              "coordinator rss before the close %.1f MiB\n", pc.n_ok, n, out->close_ms,
              pc.n_ok - pc.n_ended, pc.n_ended, (double)before.rss_kb / 1024);
    else
      fprintf(stderr, "rm-coord-load: sessions: %d of %d ended OK after the close in %.1f ms; "
              "coordinator rss before the close %.1f MiB\n", pc.n_ok, n, out->close_ms,
              (double)before.rss_kb / 1024);
    stream_verdict(ph_name, &pc, n, "ended as they should", out);
    if ((double)pc.client_hwm_kb / 1024 > out->client_mib)
      out->client_mib = (double)pc.client_hwm_kb / 1024;
  }
done:
  rc = 0;
out:
  free(ph.lat);
  free(ph.ranks);
  return rc;
}

/* graceful: QUIT and a grace period each; else (a failure) SIGKILL now. */
static void quit_clients(int graceful)
{
  load_cmd_t q = {LOAD_CMD_QUIT, 0};
  for (int k = 0; k < g.nprocs; k++) {
    if (graceful) load_write_full(g.procs[k].cmd_fd, &q, sizeof q);
    else if (g.procs[k].pid > 0) kill(g.procs[k].pid, SIGKILL);
    close(g.procs[k].cmd_fd);
  }
  for (int k = 0; k < g.nprocs; k++) {
    if (g.procs[k].pid > 0) reap(g.procs[k].pid, 10000);
    g.procs[k].pid = 0;
    close(g.procs[k].res_fd);
  }
  g.nprocs = 0;
}

static int run_size(const opts_t *o, int n, result_t *out)
{
  char addr[64], token[96];
  uint64_t job;
  int out_fd = -1, rc = -1;
  int procs = o->procs ? o->procs : (n + WORKERS_PER_PROC - 1) / WORKERS_PER_PROC;
  if (procs < 1) procs = 1;
  if (procs > n) procs = n;
  if (procs > MAX_PROCS) procs = MAX_PROCS;
  memset(out, 0, sizeof *out);
  snprintf(g.dir, sizeof g.dir, "/tmp/rm-coord-load-XXXXXX");
  if (!mkdtemp(g.dir)) {
    g.dir[0] = 0;
    return -1;
  }
  int relay_fds[MAX_RELAYS];
  for (int i = 0; i < MAX_RELAYS; i++) relay_fds[i] = -1;
  if (start_coord(o->bin, addr, sizeof addr, &out_fd)) goto out;
  if (o->real_relays && start_relays(o->bin, addr, o->real_relays, relay_fds)) goto out;
  fprintf(stderr, "rm-coord-load: %d workers, %d procs: coordinator pid %d at %s\n", n, procs,
          (int)g.coord, addr);
  if (submit(addr, n, o->timeout_s, o->gate > 0, &job, token, sizeof token)) goto out;
  usleep(200000); /* let the submit settle before the base RSS */
  usage_t base = coord_usage(g.coord);
  load_client_cfg_t cfg = {.addr = addr, .job_id = job, .token = token, .world = n,
                           .timeout_s = o->timeout_s, .gzip = o->gzip,
                           .session = o->session, .relay = o->relay};
  if (getloadavg(&out->load0, 1) != 1) out->load0 = -1;
  long anon0 = 0, file0 = 0;
  coord_anon(g.coord, &anon0, &file0);
  if (fork_clients(o, &cfg, n, procs)) goto out;
  static pid_t sampled;
  sampled = g.coord;
  sampler.anon_peak_kb = anon0;
  sampler.file_peak_kb = file0;
  sampler.started = pthread_create(&sampler.th, NULL, sample_anon, &sampled) == 0;
  size_t per = 0;
  for (int k = 0; k < procs; k++)
    if ((size_t)(g.procs[k].hi - g.procs[k].lo) > per) per = (size_t)(g.procs[k].hi - g.procs[k].lo);
  if (run_phases(o, n, per, out)) goto out;
  usage_t end = coord_usage(g.coord);
  for (int i = 0; i < g.nrelays; i++) {
    usage_t ru = coord_usage(g.relays[i]);
    out->relay_mib += (double)ru.hwm_kb / 1024;
    out->relay_cpu_s += ru.cpu_s;
  }
  sampler_stop();
  out->anon_base_mib = (double)anon0 / 1024;
  out->anon_peak_mib = (double)sampler.anon_peak_kb / 1024;
  out->anon_per_worker_b = (double)(sampler.anon_peak_kb - anon0) * 1024 / n;
  out->file_growth_mib = (double)(sampler.file_peak_kb - file0) / 1024;
  out->cpu_s = end.cpu_s;
  out->hwm_mib = (double)end.hwm_kb / 1024;
  out->base_mib = (double)base.rss_kb / 1024;
  out->end_mib = (double)end.rss_kb / 1024;
  out->per_worker_b = (double)(end.hwm_kb - base.rss_kb) * 1024 / n;
  if (getloadavg(&out->load1, 1) != 1) out->load1 = -1;
  printf("workers %5d | procs %3d | session %d | relay %d | join (all formed) %8.1f ms, "
         "%d gzip answers | ", n, procs, o->session, o->relay, out->join_s * 1e3, out->gzip);
  if (o->real_relays)
    printf("real relays %d: peak rss %.1f MiB in all (%.0f B a worker), cpu %.2f s in all | ",
           o->real_relays, out->relay_mib, out->relay_mib * 1048576 / n, out->relay_cpu_s);
  if (o->session == 2 && out->closed)
    printf("watches: opened in %.1f ms, %d cancelled in %.1f ms (%d ended OK by the "
           "coordinator first) | ", out->open_ms, out->closed_ok, out->close_ms, out->ended);
  else if (o->session == 1 && out->closed)
    printf("sessions: opened in %.1f ms, %d closed OK in %.1f ms | ", out->open_ms,
           out->closed_ok, out->close_ms);
  else if (o->session)
    printf("%s: opened in %.1f ms, not closed (a failure) | ",
           o->session == 2 ? "watches" : "sessions", out->open_ms);
  printf("barrier%s p50 %7.2f p99 %7.2f max %7.2f ms | round %7.2f ms | ",
         o->session == 1 ? " as session messages" : "", out->p50, out->p99, out->max,
         out->round_ms);
  if (o->gate > 0)
    printf("step gate %d steps, %d dropped, %d gzip answers: p50 %7.2f p99 %7.2f max %7.2f ms, "
           "coordinator cpu %.2f s, clients cpu %.2f s | ", o->gate, out->gate_dropped,
           out->gate_gzip, out->g50, out->g99, out->gmax, out->cpu_gate, out->cli_gate);
  if (o->session == 1)
    printf("heartbeat %d/s as session messages (%d sent, %d late): ", n, out->hb_beats,
           out->hb_late);
  else
    printf("heartbeat %d/s: ", n);
  printf("coordinator %5.1f%% of a core (clients %.1f%%), %.1f us a "
         "heartbeat = %.1f%% at %d/s, %sp99 %6.2f ms | coordinator cpu %6.2f s (join %.2f, "
         "barriers %.2f) | clients cpu: join %.2f s, barriers %.2f s | rss base %.1f MiB, "
         "peak %.1f MiB, %.0f B/worker, at the end %.1f MiB | anonymous rss base %.1f MiB, "
         "peak %.1f MiB, %.0f B/worker (file-backed pages +%.1f MiB) | clients peak rss %.0f "
         "MiB | load average %.1f -> %.1f | failures %d\n",
         out->hb_pct, out->cli_hb_pct, out->hb_us, out->hb_us * n / 1e4, n,
         o->session == 1 ? "send " : "", out->hb_p99,
         out->cpu_s, out->cpu_join, out->cpu_bar, out->cli_join, out->cli_bar, out->base_mib,
         out->hwm_mib, out->per_worker_b, out->end_mib, out->anon_base_mib, out->anon_peak_mib,
         out->anon_per_worker_b, out->file_growth_mib, out->client_mib, out->load0,
         out->load1, out->failures);
  fflush(stdout);
  rc = 0;
out:
  sampler_stop(); /* a failed run */
  quit_clients(rc == 0);
  for (int i = 0; i < g.nrelays; i++) { /* before the coordinator: nobody is lost */
    kill(g.relays[i], SIGTERM);
    reap(g.relays[i], 10000);
    g.relays[i] = 0;
    if (relay_fds[i] >= 0) close(relay_fds[i]);
  }
  g.nrelays = 0;
  if (g.coord > 0) {
    kill(g.coord, SIGTERM);
    reap(g.coord, 10000);
    g.coord = 0;
  }
  if (out_fd >= 0) close(out_fd);
  remove_dir();
  g.dir[0] = 0;
  return rc;
}

static int parse(int argc, char **argv, opts_t *o)
{
  memset(o, 0, sizeof *o);
  o->rounds = 20;
  o->heartbeat_s = 5;
  o->timeout_s = 300;
  o->gzip = 1;
  o->gate = 0;
  o->session = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--ringmaster")) o->bin = v;
    else if (!strcmp(k, "--workers") && o->nc < MAX_SIZES) o->counts[o->nc++] = atoi(v);
    else if (!strcmp(k, "--rounds")) o->rounds = atoi(v);
    else if (!strcmp(k, "--procs")) o->procs = atoi(v);
    else if (!strcmp(k, "--channels")) o->channels = atoi(v);
    else if (!strcmp(k, "--heartbeat-s")) o->heartbeat_s = atoi(v);
    else if (!strcmp(k, "--timeout-s")) o->timeout_s = atoi(v);
    else if (!strcmp(k, "--gzip")) o->gzip = atoi(v);
    else if (!strcmp(k, "--gate-steps")) o->gate = atoi(v);
    else if (!strcmp(k, "--session")) o->session = atoi(v);
    else if (!strcmp(k, "--relay")) o->relay = atoi(v);
    else if (!strcmp(k, "--real-relays")) o->real_relays = atoi(v);
    else return -1;
  }
  if (!o->nc) {
    o->counts[o->nc++] = 1024;
    o->counts[o->nc++] = 4096;
  }
  for (int i = 0; i < o->nc; i++)
    if (o->counts[i] < 1 || o->counts[i] > 65536) return -1;
  if (!o->bin || o->rounds < 1 || o->procs < 0 || o->procs > MAX_PROCS || o->channels < 0 ||
      o->heartbeat_s < 0 || o->timeout_s < 5 || (o->gzip != 0 && o->gzip != 1) ||
      o->gate < 0 || o->session < 0 || o->session > 2 || o->relay < 0 ||
      o->relay > 65535 || (o->relay && o->session != 1) || o->real_relays < 0 ||
      o->real_relays > MAX_RELAYS || (o->real_relays && (o->session != 1 || o->relay)))
    return -1;
  return 0;
}

int main(int argc, char **argv)
{
  opts_t o;
  if ((argc % 2) != 1 || parse(argc, argv, &o)) {
    fprintf(stderr, "usage: rm-coord-load --ringmaster PATH [--workers N]... [--rounds R]\n"
                    "         [--procs P] [--channels C] [--heartbeat-s S] [--timeout-s T]\n"
                    "         [--gzip 0|1] [--gate-steps K] [--session 0|1|2] [--relay K]\n"
                    "         [--real-relays R]\n");
    return 2;
  }
  struct rlimit rl;
  if (!getrlimit(RLIMIT_NOFILE, &rl)) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  int rc = 0;
  for (int i = 0; i < o.nc && !rc; i++) {
    result_t r;
    if (run_size(&o, o.counts[i], &r)) rc = 1;
    else if (r.failures) rc = 1;
  }
  return rc;
}
