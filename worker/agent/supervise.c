/*
 * supervise.c - ringmaster-worker as the supervisor of a command job's
 * program (workload "command").
 *
 * The agent does not join the job. It asks the coordinator for the spec
 * (Attach), starts the user's program with the session variables set, and
 * watches it; the program joins itself through libringmaster's session API
 * (rm_session_join_env, or ringmaster.init() in Python) with the agent's
 * launch index as its rank hint.
 *
 *   ATTACH      spec (command, env, workdir), world size; launch index 0
 *               also offers MASTER_PORT (a port free on its host, below
 *               the kernel's ephemeral range: free_port); the
 *               others poll until the coordinator knows it (<= connect
 *               timeout; without it they start with no MASTER_* set)
 *   START       fork; child: PR_SET_PDEATHSIG(SIGKILL) so it dies with
 *               us, chdir(workdir), stderr -> our pipe, execvpe(argv)
 *   SUPERVISE   poll the pipe (copy to our stderr, keep the last 4 KiB),
 *               waitpid, and every second Attach:
 *                 not joined within connect_timeout_ms -> stop it
 *                 ("did not join"), the job fails
 *                 job ended and the program still runs after 10 s -> stop
 *               SIGTERM/SIGINT to us -> forwarded to the program
 *   STOP        SIGTERM, 5 s, SIGKILL (by PID)
 *   REPORT      ReportExit(exit status or signal, stderr tail, reason):
 *               the coordinator records a program_exited event and decides
 *               (a member loss for on_failure, or the job fails)
 *   EXIT        0 when the program exited 0, else 1
 *
 * Environment of the program: ours, then the job's env entries, then
 *   RINGMASTER_COORDINATOR, RINGMASTER_JOB, RINGMASTER_TOKEN,
 *   RINGMASTER_LAUNCH_INDEX, RINGMASTER_LAUNCH_WORLD, RINGMASTER_HOST,
 *   RINGMASTER_DATA_ADDR, RINGMASTER_COORDINATOR_TIMEOUT_MS,
 *   RINGMASTER_DATA_TIMEOUT_MS, RINGMASTER_TLS_CA/_CERT/_KEY,
 * and for torchrun-style scripts (first generation):
 *   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
 * (LOCAL_* from RINGMASTER_LOCAL_RANK/_WORLD of the local launcher, else
 * SLURM_LOCALID / SLURM_NTASKS_PER_NODE, else 0 / 1).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "session/control.h"
#include "session/session_int.h"

extern char **environ;

#define TAIL_MAX 4096

typedef struct sup {
  const rm_agent_opts_t *o;
  rm__ctl_t *ctl;
  Ringmaster__V1__AttachResponse *att; /* first answer: the spec */
  char host[128];                      /* MASTER_ADDR if we are index 0 */
  char master_addr[160];
  unsigned master_port;
  pid_t pid;
  int err_fd;                          /* read end of the program's stderr */
  char tail[TAIL_MAX];                 /* ring of its last stderr bytes */
  size_t tail_len, tail_pos;
  int joined;
  char reason[300];                    /* ours, when we stopped it */
} sup_t;

static volatile sig_atomic_t g_forward; /* signal to pass to the program */

static void on_signal(int sig) { g_forward = sig; }

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- Attach ---- */
static int attach(sup_t *s, int retry, Ringmaster__V1__AttachResponse **out,
                  char *msg, size_t msglen)
{
  int backoff = 100;
  int64_t give_up = rm__now_ns() + (int64_t)s->o->connect_timeout_ms * 1000000;
  for (;;) {
    Ringmaster__V1__AttachRequest q = RINGMASTER__V1__ATTACH_REQUEST__INIT;
    q.job_id = s->o->job_id;
    q.token = (char *)s->o->token;
    q.launch_index = s->o->rank_hint;
    q.host = s->host;
    q.master_port = s->o->rank_hint == 0 ? s->master_port : 0;
    int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/Attach", &q.base,
                          &ringmaster__v1__attach_response__descriptor,
                          (ProtobufCMessage **)out, 5000, msg, msglen);
    if (rc == RM__G_OK || !retry || (rc != RM__G_UNAVAILABLE && rc != RM__G_DEADLINE))
      return rc;
    if (rm__now_ns() > give_up) return rc;
    sleep_ms(backoff);
    backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
  }
}

/* Host part of "host:port" (the data address), else the host name. */
static void our_host(const rm_agent_opts_t *o, char *buf, size_t len)
{
  if (o->data_addr && o->data_addr[0] != '[') {
    const char *c = strrchr(o->data_addr, ':');
    size_t n = c ? (size_t)(c - o->data_addr) : strlen(o->data_addr);
    if (n && !(n == 7 && !strncmp(o->data_addr, "0.0.0.0", 7))) {
      snprintf(buf, len, "%.*s", (int)n, o->data_addr);
      return;
    }
  }
  if (o->host) snprintf(buf, len, "%s", o->host);
  else snprintf(buf, len, "127.0.0.1");
}

/* Bind host:port (0: the kernel picks), read the port back, close: the
 * port was free a moment ago, or 0. */
static unsigned try_port(const char *host, unsigned want)
{
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)want)};
  socklen_t n = sizeof a;
  unsigned port = 0;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &n) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* MASTER_PORT: a TCP port free on our host now, which the program binds
 * seconds later (torch's store, after `import torch`). Between the two
 * the port is nobody's, and a port of the kernel's ephemeral range
 * (net.ipv4.ip_local_port_range) can be taken by any outgoing connect()
 * on the host: the program then fails with "address already in use".
 * So the port is drawn below that range, where only an explicit bind can
 * take it, and bound once to see it free; after 64 draws that were all
 * taken, or where no such range exists, the kernel picks one. */
static unsigned free_port(const char *host)
{
  unsigned lo = 32768; /* the range's start; Linux's default when unreadable */
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f) {
    if (fscanf(f, "%u", &lo) != 1) lo = 0;
    fclose(f);
  }
  const unsigned floor_ = 10000; /* above the well-known and most fixed service ports */
  if (lo > floor_ + 1000) {
    unsigned x = (unsigned)getpid() * 2654435761u ^ (unsigned)rm__now_ns();
    for (int i = 0; i < 64; i++) {
      x = x * 1103515245u + 12345u;
      unsigned port = try_port(host, floor_ + (x >> 8) % (lo - floor_));
      if (port) return port;
    }
  }
  return try_port(host, 0);
}

int rm__agent_attach_workload(const rm_agent_opts_t *o, char *workload, size_t len)
{
  char err[256], msg[256];
  sup_t s = {.o = o};
  Ringmaster__V1__AttachResponse *r = NULL;
  our_host(o, s.host, sizeof s.host);
  s.ctl = rm__ctl_open(o->coordinator, o->tls_ca, o->tls_cert, o->tls_key, err, sizeof err);
  if (!s.ctl) {
    fprintf(stderr, "ringmaster-worker: %s\n", err);
    return 3;
  }
  int rc = attach(&s, 1, &r, msg, sizeof msg);
  rm__ctl_close(s.ctl);
  if (rc == 12) { /* UNIMPLEMENTED: a coordinator older than command jobs */
    workload[0] = 0; /* not a command job: the Join answer says which */
    return 0;
  }
  if (rc != RM__G_OK) {
    fprintf(stderr, "ringmaster-worker: the coordinator %s did not let us attach "
            "to job %llu: %s (gRPC status %d)\n", o->coordinator,
            (unsigned long long)o->job_id, msg, rc);
    return 3;
  }
  snprintf(workload, len, "%s", r->spec && r->spec->workload[0] ? r->spec->workload : "allreduce");
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return 0;
}

/* ---- environment ---- */
typedef struct { char **v; size_t n, cap; } envv_t;

static int env_set(envv_t *e, const char *kv)
{
  const char *eq = strchr(kv, '=');
  size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);
  char *copy = strdup(kv);
  if (!copy) return -1;
  for (size_t i = 0; i < e->n; i++)
    if (!strncmp(e->v[i], kv, klen) && e->v[i][klen] == '=') {
      free(e->v[i]);
      e->v[i] = copy;
      return 0;
    }
  if (e->n + 2 > e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 64;
    char **v = realloc(e->v, cap * sizeof *v);
    if (!v) { free(copy); return -1; }
    e->v = v;
    e->cap = cap;
  }
  e->v[e->n++] = copy;
  e->v[e->n] = NULL;
  return 0;
}

static int env_setf(envv_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int env_setf(envv_t *e, const char *fmt, ...)
{
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return env_set(e, buf);
}

static void env_free(envv_t *e)
{
  for (size_t i = 0; i < e->n; i++) free(e->v[i]);
  free(e->v);
}

static int env_int(const char *name, int dflt)
{
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static int build_env(sup_t *s, envv_t *e)
{
  const rm_agent_opts_t *o = s->o;
  const Ringmaster__V1__JobSpec *spec = s->att->spec;
  int bad = 0;
  for (char **p = environ; *p; p++) bad |= env_set(e, *p);
  for (size_t i = 0; spec && i < spec->n_env; i++) bad |= env_set(e, spec->env[i]);
  bad |= env_setf(e, "RINGMASTER_COORDINATOR=%s", o->coordinator);
  bad |= env_setf(e, "RINGMASTER_JOB=%llu", (unsigned long long)o->job_id);
  bad |= env_setf(e, "RINGMASTER_TOKEN=%s", o->token);
  bad |= env_setf(e, "RINGMASTER_LAUNCH_INDEX=%d", o->rank_hint);
  bad |= env_setf(e, "RINGMASTER_LAUNCH_WORLD=%u",
                  o->world_hint > 0 ? (unsigned)o->world_hint : s->att->world_size);
  bad |= env_setf(e, "RINGMASTER_COORDINATOR_TIMEOUT_MS=%d", o->connect_timeout_ms);
  if (o->host) bad |= env_setf(e, "RINGMASTER_HOST=%s", o->host);
  if (o->data_addr) bad |= env_setf(e, "RINGMASTER_DATA_ADDR=%s", o->data_addr);
  if (o->data_timeout_ms > 0) bad |= env_setf(e, "RINGMASTER_DATA_TIMEOUT_MS=%d", o->data_timeout_ms);
  if (o->tls_ca) bad |= env_setf(e, "RINGMASTER_TLS_CA=%s", o->tls_ca);
  if (o->tls_cert) bad |= env_setf(e, "RINGMASTER_TLS_CERT=%s", o->tls_cert);
  if (o->tls_key) bad |= env_setf(e, "RINGMASTER_TLS_KEY=%s", o->tls_key);
  /* torchrun's variables, first generation */
  bad |= env_setf(e, "RANK=%d", o->rank_hint >= 0 ? o->rank_hint : 0);
  bad |= env_setf(e, "WORLD_SIZE=%u", s->att->world_size);
  bad |= env_setf(e, "LOCAL_RANK=%d", env_int("RINGMASTER_LOCAL_RANK", env_int("SLURM_LOCALID", 0)));
  bad |= env_setf(e, "LOCAL_WORLD_SIZE=%d", env_int("RINGMASTER_LOCAL_WORLD",
                                                    env_int("SLURM_NTASKS_PER_NODE", 1)));
  if (s->master_addr[0]) {
    bad |= env_setf(e, "MASTER_ADDR=%s", s->master_addr);
    bad |= env_setf(e, "MASTER_PORT=%u", s->master_port);
  }
  return bad ? -1 : 0;
}

/* ---- the program ---- */
static void child(sup_t *s, int err_w, char **argv, char **envp, pid_t parent)
{
  const char *wd = s->att->spec->workdir;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(125); /* the agent died before prctl */
  signal(SIGPIPE, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  dup2(err_w, 2);
  close(err_w);
  if (wd && wd[0] && chdir(wd) != 0) {
    dprintf(2, "ringmaster-worker: cannot enter workdir '%s': %s\n", wd, strerror(errno));
    _exit(126);
  }
  execvpe(argv[0], argv, envp);
  dprintf(2, "ringmaster-worker: cannot run '%s': %s\n", argv[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

static int start(sup_t *s)
{
  const Ringmaster__V1__JobSpec *spec = s->att->spec;
  envv_t e = {0};
  int p[2];
  char **argv = calloc(spec->n_command + 1, sizeof *argv);
  if (!argv || build_env(s, &e) || pipe2(p, O_CLOEXEC)) {
    free(argv);
    env_free(&e);
    snprintf(s->reason, sizeof s->reason, "cannot start the program: %s", strerror(errno));
    return -1;
  }
  for (size_t i = 0; i < spec->n_command; i++) argv[i] = spec->command[i];
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  s->pid = fork();
  if (s->pid == 0) child(s, p[1], argv, e.v, parent);
  close(p[1]);
  free(argv);
  env_free(&e);
  if (s->pid < 0) {
    close(p[0]);
    snprintf(s->reason, sizeof s->reason, "fork failed: %s", strerror(errno));
    return -1;
  }
  s->err_fd = p[0];
  fcntl(s->err_fd, F_SETFL, O_NONBLOCK);
  printf("ringmaster-worker: started program pid %d: %s%s\n", (int)s->pid,
         spec->command[0], spec->n_command > 1 ? " ..." : "");
  fflush(stdout);
  return 0;
}

/* Copy what the program wrote on stderr to ours, keeping the tail. */
static void pump(sup_t *s)
{
  char buf[4096];
  ssize_t n;
  while (s->err_fd >= 0 && (n = read(s->err_fd, buf, sizeof buf)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) { close(s->err_fd); s->err_fd = -1; }
      return;
    }
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
    for (ssize_t i = 0; i < n; i++) {
      s->tail[s->tail_pos] = buf[i];
      s->tail_pos = (s->tail_pos + 1) % TAIL_MAX;
      if (s->tail_len < TAIL_MAX) s->tail_len++;
    }
  }
  if (s->err_fd >= 0) { close(s->err_fd); s->err_fd = -1; } /* EOF */
}

/* The last lines of the tail (at most 10 lines, 1000 bytes). */
static void tail_lines(const sup_t *s, char *out, size_t len)
{
  char lin[TAIL_MAX + 1];
  size_t start = (s->tail_pos + TAIL_MAX - s->tail_len) % TAIL_MAX, n = s->tail_len;
  for (size_t i = 0; i < n; i++) lin[i] = s->tail[(start + i) % TAIL_MAX];
  while (n && (lin[n - 1] == '\n' || lin[n - 1] == '\r')) n--;
  lin[n] = 0;
  size_t cut = n, lines = 0, lim = len - 1 < 1000 ? len - 1 : 1000;
  while (cut > 0 && lines < 10 && n - cut < lim) {
    cut--;
    if (lin[cut] == '\n') lines++;
  }
  if (lin[cut] == '\n') cut++;
  if (n - cut > lim) cut = n - lim;
  memcpy(out, lin + cut, n - cut);
  out[n - cut] = 0;
}

static void stop(sup_t *s, int *status)
{
  kill(s->pid, SIGTERM);
  for (int i = 0; i < 50; i++) {
    pump(s);
    if (waitpid(s->pid, status, WNOHANG) == s->pid) { s->pid = 0; return; }
    sleep_ms(100);
  }
  kill(s->pid, SIGKILL);
  waitpid(s->pid, status, 0);
  s->pid = 0;
}

/* One Attach poll: joined, job state. */
static void poll_coordinator(sup_t *s, int *job_state)
{
  Ringmaster__V1__AttachResponse *r = NULL;
  char msg[256];
  int rc = attach(s, 0, &r, msg, sizeof msg);
  if (rc == RM__G_OK) {
    if (r->joined) s->joined = 1;
    *job_state = r->job_state;
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else if (rc == RM__G_NOT_FOUND || rc == RM__G_UNAUTHENTICATED) {
    *job_state = RINGMASTER__V1__JOB_STATE__JOB_STATE_FAILED;
  } else {
    RM_DEBUG("Attach: status %d: %s", rc, msg);
  }
}

static int supervise_loop(sup_t *s)
{
  int status = 0, job_state = RINGMASTER__V1__JOB_STATE__JOB_STATE_PENDING;
  int64_t started = rm__now_ns(), last_poll = 0, ended_at = 0;
  int64_t join_by = started + (int64_t)s->o->connect_timeout_ms * 1000000;
  for (;;) {
    struct pollfd pfd = {.fd = s->err_fd, .events = POLLIN};
    if (poll(&pfd, s->err_fd >= 0 ? 1 : 0, 200) > 0) pump(s);
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) { s->pid = 0; break; }
    if (g_forward) {
      RM_INFO("passing signal %d to the program (pid %d)", (int)g_forward, (int)s->pid);
      kill(s->pid, g_forward);
      g_forward = 0;
    }
    int64_t now = rm__now_ns();
    if (now - last_poll < 1000000000LL) continue;
    last_poll = now;
    poll_coordinator(s, &job_state);
    if (!s->joined && now > join_by) {
      snprintf(s->reason, sizeof s->reason, "the program did not join job %llu "
               "within %d ms (the connect timeout); stopped it",
               (unsigned long long)s->o->job_id, s->o->connect_timeout_ms);
      fprintf(stderr, "ringmaster-worker: %s\n", s->reason);
      stop(s, &status);
      break;
    }
    if (job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
      if (!ended_at) ended_at = now;
      if (now - ended_at > 10000000000LL) {
        snprintf(s->reason, sizeof s->reason, "the job ended and the program was "
                 "still running 10 s later; stopped it");
        fprintf(stderr, "ringmaster-worker: %s\n", s->reason);
        stop(s, &status);
        break;
      }
    }
  }
  pump(s);
  return status;
}

static void report_exit(sup_t *s, int status)
{
  Ringmaster__V1__ReportExitRequest q = RINGMASTER__V1__REPORT_EXIT_REQUEST__INIT;
  Ringmaster__V1__ReportExitResponse *r = NULL;
  char msg[256], tail[1024];
  tail_lines(s, tail, sizeof tail);
  q.job_id = s->o->job_id;
  q.token = (char *)s->o->token;
  q.launch_index = s->o->rank_hint;
  q.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  q.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  q.stderr_tail = tail;
  q.reason = s->reason;
  q.joined = s->joined;
  for (int i = 0; i < 5; i++) {
    int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/ReportExit", &q.base,
                          &ringmaster__v1__report_exit_response__descriptor,
                          (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
    if (rc == RM__G_OK) {
      protobuf_c_message_free_unpacked(&r->base, NULL);
      return;
    }
    if (rc != RM__G_UNAVAILABLE && rc != RM__G_DEADLINE) break;
    sleep_ms(500 << i);
  }
  RM_WARN("ReportExit: %s", msg);
}

static void describe(const sup_t *s, int status)
{
  if (WIFEXITED(status))
    printf("ringmaster-worker: program exited with status %d\n", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    printf("ringmaster-worker: program killed by signal %d (%s)\n", WTERMSIG(status),
           strsignal(WTERMSIG(status)));
  fflush(stdout);
}

int rm__agent_supervise(const rm_agent_opts_t *o)
{
  sup_t s = {.o = o, .err_fd = -1};
  char err[256], msg[256];
  int rc = 3, status = 0;
  our_host(o, s.host, sizeof s.host);
  s.ctl = rm__ctl_open(o->coordinator, o->tls_ca, o->tls_cert, o->tls_key, err, sizeof err);
  if (!s.ctl) {
    fprintf(stderr, "ringmaster-worker: %s\n", err);
    return 3;
  }
  if (o->rank_hint == 0) s.master_port = free_port(s.host);
  int64_t give_up = rm__now_ns() + (int64_t)o->connect_timeout_ms * 1000000;
  for (;;) { /* the spec, and the rendezvous address once index 0 attached */
    Ringmaster__V1__AttachResponse *r = NULL;
    int g = attach(&s, 1, &r, msg, sizeof msg);
    if (g != RM__G_OK) {
      fprintf(stderr, "ringmaster-worker: the coordinator did not let us attach "
              "to job %llu: %s (gRPC status %d)\n", (unsigned long long)o->job_id, msg, g);
      goto out;
    }
    if (r->master_port) {
      snprintf(s.master_addr, sizeof s.master_addr, "%s", r->master_addr);
      s.master_port = r->master_port;
    }
    if (s.att) protobuf_c_message_free_unpacked(&s.att->base, NULL);
    s.att = r;
    if (r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
      fprintf(stderr, "ringmaster-worker: job %llu already ended: %s\n",
              (unsigned long long)o->job_id, r->reason);
      rc = r->job_state == RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : 1;
      goto out;
    }
    if (s.master_addr[0] || rm__now_ns() > give_up) break;
    sleep_ms(100);
  }
  if (!s.master_addr[0])
    RM_WARN("launch index 0 never attached: starting without MASTER_ADDR/MASTER_PORT");
  if (!s.att->spec || !s.att->spec->n_command) {
    fprintf(stderr, "ringmaster-worker: job %llu has no command to run\n",
            (unsigned long long)o->job_id);
    rc = 1;
    goto out;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  if (start(&s) == 0) {
    status = supervise_loop(&s);
    describe(&s, status);
  } else {
    fprintf(stderr, "ringmaster-worker: %s\n", s.reason);
    status = 1 << 8; /* as if it exited 1 */
  }
  report_exit(&s, status);
  rc = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !s.reason[0] ? 0 : 1;
out:
  if (s.err_fd >= 0) close(s.err_fd);
  if (s.att) protobuf_c_message_free_unpacked(&s.att->base, NULL);
  rm__ctl_close(s.ctl);
  return rc;
}
