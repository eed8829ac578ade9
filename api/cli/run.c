/*
 * run.c - `ringmaster run` and `ringmaster logs`, over the same
 * REST API as the rest of the CLI.
 *
 * run -n N [options] -- PROG ARGS...
 *
 *   resolve the server:  --server, else RINGMASTER_SERVER, else the default
 *                        address if /healthz answers there, else a PRIVATE
 *                        coordinator: `ringmaster serve` (this binary) as a
 *                        child on 127.0.0.1 port 0 for gRPC and HTTP, a
 *                        generated API token in a 0600 file, db and logs in
 *                        ./ringmaster-run/; its "http listening on" line is
 *                        read from its log (deadline 15 s)
 *   submit               POST /api/v1/jobs {"workload": "command", ...}
 *   follow (every 250 ms, until the job is terminal):
 *     events             GET .../events?after=SEQ: state, generation and
 *                        membership changes, program exits, printed as
 *                        "ringmaster run: ..." on stderr
 *     output             GET .../workers/{i}/log?offset=OFF per launch
 *                        index (the world, plus replacements seen in
 *                        GET .../workers): new complete lines on stdout as
 *                        "[i] line" (i = launch index = the rank of the
 *                        first generation)
 *   end                  drain the logs once more, print the outcome;
 *                        exit 0 succeeded, 1 failed or cancelled
 *   Ctrl-C               the first: cancel over REST, keep following until
 *                        the job is terminal (deadline 20 s), exit 130; the
 *                        second: stop following at once (exit 130)
 *   private coordinator  stopped by PID at the end: SIGTERM, 10 s, SIGKILL
 *
 * logs ID [--follow] [--worker N]: the same follower without the submit;
 * without --follow one pass over what is there.
 *
 * Every wait has a deadline; every request has the --timeout deadline
 * (and --connect-timeout for connecting). The requests go through one
 * libcurl handle (http_client.h), so following reuses one connection; a
 * Ctrl-C abandons the request in flight, as it interrupts a sleep.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_int.h"
#include "rm_signal.h"

#define DEFAULT_SERVER "http://127.0.0.1:8080"
#define RUN_DIR "ringmaster-run"
#define MAX_FOLLOW 256  /* launch indexes followed */
#define CANCEL_WAIT_MS 20000
#define PRIVATE_START_MS 15000
#define PRIVATE_STOP_MS 10000
#define LOST_SERVER_MS 30000

static volatile sig_atomic_t g_interrupts;
static void on_sigint(int sig) { (void)sig; g_interrupts++; }

static long long now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL); /* EINTR (Ctrl-C) ends it early: fine */
}

/* ---- the follower: events and logs of one job ---- */
typedef struct {
  long long off;   /* next byte to ask for */
  char *part;      /* an unfinished line, heap */
  size_t npart;
} wlog_t;

typedef struct {
  cli_t *c;
  char id[24];
  long long after;     /* last event seq printed */
  int only;            /* --worker N, -1 all */
  int nidx;            /* indexes followed: 0..nidx-1 */
  wlog_t w[MAX_FOLLOW];
  int events;          /* print events */
  int prefix;          /* "[i] " before each line */
} follow_t;

static void emit_line(follow_t *f, int i, const char *s, size_t n)
{
  if (n >= 29 && !strncmp(s, "# ringmaster local launcher: ", 29)) return;
  if (f->prefix) printf("[%d] ", i);
  fwrite(s, 1, n, stdout);
  fputc('\n', stdout);
  fflush(stdout); /* live through a pipe too (ringmaster run | tee) */
}

/* Split new bytes of worker i's log into lines; keep the tail. */
static void feed(follow_t *f, int i, const char *b, size_t n, int flush)
{
  wlog_t *w = &f->w[i];
  size_t start = 0;
  for (size_t k = 0; k < n; k++) {
    if (b[k] != '\n') continue;
    if (w->npart) {
      w->part = realloc(w->part, w->npart + (k - start) + 1);
      if (!w->part) abort();
      memcpy(w->part + w->npart, b + start, k - start);
      emit_line(f, i, w->part, w->npart + (k - start));
      w->npart = 0;
    } else {
      emit_line(f, i, b + start, k - start);
    }
    start = k + 1;
  }
  if (start < n) {
    w->part = realloc(w->part, w->npart + (n - start) + 1);
    if (!w->part) abort();
    memcpy(w->part + w->npart, b + start, n - start);
    w->npart += n - start;
  }
  if (flush && w->npart) {
    emit_line(f, i, w->part, w->npart);
    w->npart = 0;
  }
}

/* One quiet GET of worker i's log from its offset (404 = not there yet). */
static void poll_log(follow_t *f, int i, int flush)
{
  char path[160];
  char err[256];
  rm__http_reply_t r;
  rm__http_opts_t o = rm__cli_http_opts(f->c, f->c->timeout_ms);
  snprintf(path, sizeof path, "/api/v1/jobs/%s/workers/%d/log?offset=%lld", f->id, i,
           f->w[i].off);
  if (rm__http_request(f->c->server, "GET", path, &o, NULL, 0, &r, err, sizeof err) != 0)
    return;
  if (r.status == 200) {
    feed(f, i, r.body, r.len, flush);
    /* secrets masked: the body is not the file's bytes, the server says
     * where to go on */
    f->w[i].off = r.next_offset >= 0 ? r.next_offset : f->w[i].off + (long long)r.len;
  } else if (flush) {
    feed(f, i, "", 0, 1);
  }
  free(r.body);
  fflush(stdout);
}

static int interesting(const char *kind)
{
  static const char *const kinds[] = {"job_state", "generation", "worker_lost", "worker_failed",
                                      "program_exited", "recovery", "relaunch",
                                      "relaunch_failed", "relaunch_unsupported",
                                      "launcher_missing", "launch_failed", NULL};
  for (int i = 0; kinds[i]; i++)
    if (!strcmp(kind, kinds[i])) return 1;
  return 0;
}

static void poll_events(follow_t *f)
{
  char path[160];
  json_t *r = NULL, *e;
  size_t i;
  snprintf(path, sizeof path, "/api/v1/jobs/%s/events?after=%lld", f->id, f->after);
  if (rm__cli_call(f->c, "GET", path, NULL, &r) != RM_CLI_EXIT_OK) return;
  json_array_foreach(json_object_get(r, "events"), i, e) {
    const char *kind = rm__cli_jstr(e, "kind");
    f->after = rm__cli_jint(e, "seq");
    if (f->events && interesting(kind))
      fprintf(stderr, "ringmaster run: %s: %s\n", kind, rm__cli_jstr(e, "message"));
  }
  json_decref(r);
}

/* Replacements have launch indexes past the world: follow them too. */
static void poll_workers(follow_t *f)
{
  char path[160];
  json_t *r = NULL, *w;
  size_t i;
  snprintf(path, sizeof path, "/api/v1/jobs/%s/workers", f->id);
  if (rm__cli_call(f->c, "GET", path, NULL, &r) != RM_CLI_EXIT_OK) return;
  json_array_foreach(json_object_get(r, "workers"), i, w) {
    long long ix = rm__cli_jint(w, "launch_index");
    if (ix >= f->nidx && ix < MAX_FOLLOW) f->nidx = (int)ix + 1;
  }
  json_decref(r);
}

static void poll_logs(follow_t *f, int flush)
{
  for (int i = 0; i < f->nidx; i++)
    if (f->only < 0 || f->only == i) poll_log(f, i, flush);
}

/* The job's state ("" when it could not be read); *job new reference. */
static const char *job_state(follow_t *f, json_t **job)
{
  char path[96];
  json_decref(*job);
  *job = NULL;
  snprintf(path, sizeof path, "/api/v1/jobs/%s", f->id);
  if (rm__cli_call(f->c, "GET", path, NULL, job) != RM_CLI_EXIT_OK) return "";
  return rm__cli_jstr(*job, "state");
}

static int terminal(const char *st)
{
  return !strcmp(st, "succeeded") || !strcmp(st, "failed") || !strcmp(st, "cancelled");
}

static void cancel_job(follow_t *f)
{
  char path[96];
  json_t *r = NULL;
  snprintf(path, sizeof path, "/api/v1/jobs/%s/cancel", f->id);
  fprintf(stderr, "ringmaster run: interrupted: cancelling job %s\n", f->id);
  rm__cli_call(f->c, "POST", path, "{\"reason\":\"cancelled by Ctrl-C (ringmaster run)\"}", &r);
  json_decref(r);
}

/* Follow until the job ends (follow = 1) or one pass. Returns the final
 * job (new reference) or NULL. cancel_on_int: Ctrl-C cancels the job. */
static json_t *follow(follow_t *f, int forever, int cancel_on_int)
{
  json_t *job = NULL;
  long long cancel_deadline = 0, last_workers = 0, last_ok = now_ms();
  int cancelled = 0;
  for (;;) {
    const char *st = job_state(f, &job);
    if (*st) last_ok = now_ms();
    else if (now_ms() - last_ok > LOST_SERVER_MS) {
      fprintf(stderr, "ringmaster: no answer about job %s for %d s; giving up\n", f->id,
              LOST_SERVER_MS / 1000);
      break;
    }
    if (f->events) poll_events(f);
    if (now_ms() - last_workers > 1000) {
      poll_workers(f);
      last_workers = now_ms();
    }
    int done = terminal(st) || !forever;
    poll_logs(f, done);
    if (done) break;
    if (g_interrupts >= 2 || (cancel_deadline && now_ms() > cancel_deadline)) break;
    if (g_interrupts && !cancelled) {
      cancelled = 1;
      if (cancel_on_int) cancel_job(f);
      else break;
      cancel_deadline = now_ms() + CANCEL_WAIT_MS;
    }
    sleep_ms(250);
  }
  return job;
}

static void follow_free(follow_t *f)
{
  for (int i = 0; i < MAX_FOLLOW; i++) free(f->w[i].part);
}

/* ---- the private coordinator ---- */
typedef struct {
  pid_t pid;
  char server[128];
} private_t;

static int file_has_http(const char *path, char *addr, size_t len)
{
  char buf[8192];
  static const char key[] = "ringmaster: http listening on ";
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n;
  if (fd < 0) return 0;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char *p = strstr(buf, key), *e;
  if (!p || !(e = strchr(p, '\n'))) return 0;
  p += sizeof key - 1;
  snprintf(addr, len, "http://%.*s", (int)(e - p), p);
  return 1;
}

static int make_token(char *tok, size_t len, const char *path)
{
  unsigned char raw[24];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  for (size_t i = 0; i < sizeof raw && 2 * i + 2 < len; i++)
    snprintf(tok + 2 * i, 3, "%02x", raw[i]);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int ok = write(fd, tok, strlen(tok)) == (ssize_t)strlen(tok);
  close(fd);
  return ok ? 0 : -1;
}

static void private_stop(private_t *p)
{
  int status;
  if (p->pid <= 0) return;
  kill(p->pid, SIGTERM);
  for (long long end = now_ms() + PRIVATE_STOP_MS; now_ms() < end; sleep_ms(50))
    if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
      p->pid = 0;
      return;
    }
  kill(p->pid, SIGKILL);
  waitpid(p->pid, &status, 0);
  p->pid = 0;
}

static int private_start(private_t *p, cli_t *c)
{
  char log[] = RUN_DIR "/coordinator.log", tokf[] = RUN_DIR "/api-token";
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  if ((mkdir(RUN_DIR, 0700) != 0 && errno != EEXIST) ||
      (mkdir(RUN_DIR "/logs", 0700) != 0 && errno != EEXIST) ||
      make_token(c->token, sizeof c->token, tokf) != 0) {
    fprintf(stderr, "ringmaster run: cannot prepare ./%s: %s\n", RUN_DIR, strerror(errno));
    return -1;
  }
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return -1;
  }
  if (pid == 0) {
    int nul = open("/dev/null", O_RDONLY);
    setpgid(0, 0); /* our Ctrl-C is not its Ctrl-C: we stop it ourselves */
    if (nul >= 0) dup2(nul, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(exe, exe, "serve", "--db", RUN_DIR "/ringmaster.db", "--grpc", "127.0.0.1:0",
          "--http", "127.0.0.1:0", "--api-token-file", tokf, "--log-dir", RUN_DIR "/logs",
          (char *)NULL);
    _exit(127);
  }
  close(fd);
  p->pid = pid;
  for (long long end = now_ms() + PRIVATE_START_MS; now_ms() < end; sleep_ms(50)) {
    int status;
    if (file_has_http(log, p->server, sizeof p->server)) {
      c->server = p->server;
      fprintf(stderr, "ringmaster run: no coordinator at %s; started a private one "
              "(pid %d, %s, state and logs in ./%s/); it stops when this run ends\n",
              DEFAULT_SERVER, (int)pid, p->server, RUN_DIR);
      return 0;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->pid = 0;
      fprintf(stderr, "ringmaster run: the private coordinator exited at start; see ./%s\n",
              log);
      return -1;
    }
  }
  fprintf(stderr, "ringmaster run: the private coordinator did not start within %d ms; "
          "see ./%s\n", PRIVATE_START_MS, log);
  private_stop(p);
  return -1;
}

static int server_answers(cli_t *c)
{
  rm__http_reply_t r;
  char err[256];
  rm__http_opts_t o = rm__cli_http_opts(c, 1500);
  o.token = NULL;
  if (rm__http_request(c->server, "GET", "/healthz", &o, NULL, 0, &r, err, sizeof err) != 0)
    return 0;
  free(r.body);
  return r.status == 200;
}

/* ---- argument parsing ---- */
typedef struct {
  long n, min_workers, max_restarts, hb;
  int timeout_ms, connect_timeout_ms;
  long long steps;
  const char *launcher, *on_failure, *name, *workdir, *algorithm;
  const char *server, *token, *token_file, *cacert;
  json_t *env;   /* object */
  json_t *argv;  /* array */
  json_t *secure; /* --secure-aggregation: the spec's object, or NULL */
} run_args_t;

static const char k_run_usage[] =
    "usage: ringmaster run -n N [--launcher local|slurm] [--on-failure "
    "fail|shrink|replace] [--min-workers N] [--max-restarts N] [--steps N] "
    "[--name NAME] [--env K=V]... [--workdir DIR] [--algorithm A] "
    "[--heartbeat-timeout-ms N] [--secure-aggregation JSON] [--server URL] "
    "[--token T] [--token-file F] "
    "[--cacert FILE] [--timeout MS] [--connect-timeout MS] -- PROG ARGS...\n";

/* A parse result that is not an error: --help printed the usage. */
#define RUN_HELP (-1)

static int usage_err(const char *fmt, const char *arg)
{
  fprintf(stderr, "ringmaster run: ");
  fprintf(stderr, fmt, arg ? arg : "");
  fprintf(stderr, "\n%s", k_run_usage);
  return RM_CLI_EXIT_USAGE;
}

static int num(const char *opt, const char *v, long long lo, long long hi, long long *out)
{
  char *end;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo || x > hi) {
    fprintf(stderr, "ringmaster: %s needs an integer in %lld..%lld, got '%s'\n", opt, lo,
            hi, v ? v : "");
    return -1;
  }
  *out = x;
  return 0;
}

/* Returns 0, or an exit code. */
static int parse_run(run_args_t *a, int argc, char **argv)
{
  int i;
  long long x;
  memset(a, 0, sizeof *a);
  a->min_workers = a->max_restarts = a->hb = -1;
  a->steps = -1;
  a->env = json_object();
  a->argv = json_array();
  for (i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "--")) {
      i++;
      break;
    }
    if (o[0] != '-') break; /* PROG without "--" */
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      fputs(k_run_usage, stdout);
      return RUN_HELP;
    }
    static const char *const valued[] = {"-n", "--workers", "--launcher", "--on-failure",
                                         "--min-workers", "--max-restarts", "--steps",
                                         "--heartbeat-timeout-ms", "--name", "--workdir",
                                         "--algorithm", "--server", "--token",
                                         "--token-file", "--env", "--timeout",
                                         "--connect-timeout", "--cacert",
                                         "--secure-aggregation", NULL};
    int k = 0;
    while (valued[k] && strcmp(o, valued[k])) k++;
    if (!valued[k]) return usage_err("unknown option '%s'", o);
    if (!v) return usage_err("%s needs a value", o);
    i++;
    if (!strcmp(o, "-n") || !strcmp(o, "--workers")) {
      if (num(o, v, 1, 65536, &x)) return RM_CLI_EXIT_USAGE;
      a->n = (long)x;
    } else if (!strcmp(o, "--launcher")) {
      if (strcmp(v, "local") && strcmp(v, "slurm"))
        return usage_err("--launcher must be local or slurm, got '%s'", v);
      a->launcher = v;
    } else if (!strcmp(o, "--on-failure")) {
      if (strcmp(v, "fail") && strcmp(v, "shrink") && strcmp(v, "replace"))
        return usage_err("--on-failure must be fail, shrink or replace, got '%s'", v);
      a->on_failure = v;
    } else if (!strcmp(o, "--min-workers")) {
      if (num(o, v, 1, 65536, &x)) return RM_CLI_EXIT_USAGE;
      a->min_workers = (long)x;
    } else if (!strcmp(o, "--max-restarts")) {
      if (num(o, v, 0, 1000000, &x)) return RM_CLI_EXIT_USAGE;
      a->max_restarts = (long)x;
    } else if (!strcmp(o, "--steps")) {
      if (num(o, v, 1, (long long)1 << 53, &x)) return RM_CLI_EXIT_USAGE;
      a->steps = x;
    } else if (!strcmp(o, "--heartbeat-timeout-ms")) {
      if (num(o, v, 100, 3600000, &x)) return RM_CLI_EXIT_USAGE;
      a->hb = (long)x;
    } else if (!strcmp(o, "--timeout")) {
      if (num(o, v, 1, 3600000, &x)) return RM_CLI_EXIT_USAGE;
      a->timeout_ms = (int)x;
    } else if (!strcmp(o, "--connect-timeout")) {
      if (num(o, v, 1, 3600000, &x)) return RM_CLI_EXIT_USAGE;
      a->connect_timeout_ms = (int)x;
    } else if (!strcmp(o, "--secure-aggregation")) {
      /* the spec's object as is ('{}' for the defaults); the coordinator
       * checks its members and names a bad one */
      json_error_t je;
      json_decref(a->secure);
      a->secure = json_loads(v, 0, &je);
      if (!json_is_object(a->secure))
        return usage_err("--secure-aggregation wants a JSON object ('{}' for the "
                         "defaults, '{\"clip\": 5}'), got '%s'", v);
    } else if (!strcmp(o, "--cacert")) a->cacert = v;
    else if (!strcmp(o, "--name")) a->name = v;
    else if (!strcmp(o, "--workdir")) a->workdir = v;
    else if (!strcmp(o, "--algorithm")) a->algorithm = v;
    else if (!strcmp(o, "--server")) a->server = v;
    else if (!strcmp(o, "--token")) a->token = v;
    else if (!strcmp(o, "--token-file")) a->token_file = v;
    else { /* --env */
      const char *eq = strchr(v, '=');
      char key[256];
      if (!eq || eq == v || (size_t)(eq - v) >= sizeof key)
        return usage_err("--env wants KEY=VALUE, got '%s'", v);
      snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
      json_t *val = json_string(eq + 1);
      if (!val) return usage_err("--env %s: the value is not valid UTF-8", v);
      json_object_set_new(a->env, key, val);
    }
  }
  if (a->n == 0) return usage_err("-n N (the number of workers) is required%s", "");
  if (i >= argc)
    return usage_err("no program: give it after '--' (ringmaster run -n N -- python3 "
                     "train.py)%s", "");
  for (; i < argc; i++) {
    json_t *s = json_string(argv[i]);
    if (!s) return usage_err("argument '%s' is not valid UTF-8", argv[i]);
    json_array_append_new(a->argv, s);
  }
  if (a->min_workers > a->n)
    return usage_err("--min-workers must be <= -n%s", "");
  return 0;
}

/* "run-<basename of PROG>" with only [A-Za-z0-9._-]. */
static void default_name(char *out, size_t len, const char *prog)
{
  const char *b = strrchr(prog, '/');
  size_t k = (size_t)snprintf(out, len, "run-");
  for (b = b ? b + 1 : prog; *b && k + 1 < len && k < 63; b++)
    out[k++] = (char)((*b >= 'a' && *b <= 'z') || (*b >= 'A' && *b <= 'Z') ||
                              (*b >= '0' && *b <= '9') || strchr("._-", *b)
                          ? *b
                          : '_');
  out[k] = '\0';
}

static char *spec_json(const run_args_t *a)
{
  char name[64];
  json_t *s = json_object();
  default_name(name, sizeof name, json_string_value(json_array_get(a->argv, 0)));
  json_object_set_new(s, "name", json_string(a->name ? a->name : name));
  json_object_set_new(s, "workload", json_string("command"));
  if (a->min_workers > 0 && a->min_workers < a->n) { /* elastic: shrink down to min */
    json_object_set_new(s, "min_workers", json_integer(a->min_workers));
    json_object_set_new(s, "max_workers", json_integer(a->n));
  } else {
    json_object_set_new(s, "world_size", json_integer(a->n));
  }
  json_object_set(s, "command", a->argv);
  if (json_object_size(a->env)) json_object_set(s, "env", a->env);
  if (a->workdir) json_object_set_new(s, "workdir", json_string(a->workdir));
  if (a->launcher) json_object_set_new(s, "launcher", json_string(a->launcher));
  if (a->on_failure) json_object_set_new(s, "on_failure", json_string(a->on_failure));
  if (a->algorithm) json_object_set_new(s, "algorithm", json_string(a->algorithm));
  if (a->secure) json_object_set(s, "secure_aggregation", a->secure);
  if (a->max_restarts >= 0) json_object_set_new(s, "max_restarts", json_integer(a->max_restarts));
  if (a->steps > 0) json_object_set_new(s, "steps", json_integer(a->steps));
  if (a->hb > 0) json_object_set_new(s, "heartbeat_timeout_ms", json_integer(a->hb));
  char *text = json_dumps(s, JSON_COMPACT);
  json_decref(s);
  return text;
}

static int outcome(json_t *job, const char *id)
{
  const char *st = rm__cli_jstr(job, "state"), *why = rm__cli_jstr(job, "reason");
  if (g_interrupts) {
    fprintf(stderr, "ringmaster run: job %s %s after Ctrl-C\n", id, *st ? st : "not confirmed");
    return 130;
  }
  fprintf(stderr, "ringmaster run: job %s %s%s%s\n", id, *st ? st : "state unknown",
          *why ? ": " : "", why);
  return !strcmp(st, "succeeded") ? 0 : 1;
}

int rm__cli_run(cli_t *c, int argc, char **argv)
{
  run_args_t a;
  private_t priv = {0, ""};
  follow_t *f = NULL;
  json_t *job = NULL, *r = NULL;
  char *body = NULL;
  int code = parse_run(&a, argc, argv);
  if (code == RUN_HELP) {
    code = 0;
    goto exit;
  }
  if (code) goto exit;
  c->timeout_ms = a.timeout_ms > 0 ? a.timeout_ms : 10000;
  c->connect_timeout_ms = a.connect_timeout_ms;
  if (a.cacert) c->cacert = a.cacert;
  c->signals = &g_interrupts;
  if (rm__cli_check_cacert(c) || rm__cli_resolve_token(c, a.token, a.token_file)) {
    code = RM_CLI_EXIT_USAGE;
    goto exit;
  }
  if (a.server) {
    c->server = a.server;
  } else if (!getenv("RINGMASTER_SERVER") || !*getenv("RINGMASTER_SERVER")) {
    c->server = DEFAULT_SERVER;
    if (!server_answers(c) && private_start(&priv, c) != 0) {
      code = RM_CLI_EXIT_UNREACHABLE;
      goto exit;
    }
  }
  rm__on_stop_signals(on_sigint);
  body = spec_json(&a);
  code = rm__cli_call(c, "POST", "/api/v1/jobs", body, &r);
  if (code) goto exit;
  f = calloc(1, sizeof *f);
  if (!f) abort();
  f->c = c;
  snprintf(f->id, sizeof f->id, "%lld", rm__cli_jint(r, "id"));
  f->only = -1;
  f->nidx = (int)(a.n < MAX_FOLLOW ? a.n : MAX_FOLLOW);
  f->events = f->prefix = 1;
  fprintf(stderr, "ringmaster run: job %s submitted: %ld worker%s, launcher %s, on_failure %s "
          "(%s)\n", f->id, a.n, a.n == 1 ? "" : "s",
          rm__cli_jstr(json_object_get(r, "spec"), "launcher"),
          rm__cli_jstr(json_object_get(r, "spec"), "on_failure"), c->server);
  printf("%s\n", f->id);
  fflush(stdout);
  job = follow(f, 1, 1);
  code = outcome(job, f->id);
exit:
  if (f) follow_free(f);
  free(f);
  free(body);
  json_decref(job);
  json_decref(r);
  json_decref(a.env);
  json_decref(a.argv);
  json_decref(a.secure);
  if (priv.pid > 0) {
    fflush(stdout);
    fprintf(stderr, "ringmaster run: stopping the private coordinator (pid %d)\n",
            (int)priv.pid);
    private_stop(&priv);
  }
  return code;
}

/* ---- logs ---- */
static const char k_logs_usage[] =
    "usage: ringmaster logs ID [--follow] [--worker N] [--server URL] [--token T] "
    "[--token-file F] [--cacert FILE] [--timeout MS] [--connect-timeout MS]\n";

static int logs_usage_err(void)
{
  fputs(k_logs_usage, stderr);
  return RM_CLI_EXIT_USAGE;
}

int rm__cli_logs(cli_t *c, int argc, char **argv)
{
  const char *id = NULL, *token = NULL, *token_file = NULL;
  int fol = 0, only = -1;
  long long x;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "--follow") || !strcmp(o, "-f")) fol = 1;
    else if (!strcmp(o, "--worker") && v) {
      if (num(o, v, 0, 65535, &x)) return logs_usage_err();
      only = (int)x, i++;
    }
    else if (!strcmp(o, "--server") && v) c->server = v, i++;
    else if (!strcmp(o, "--token") && v) token = v, i++;
    else if (!strcmp(o, "--token-file") && v) token_file = v, i++;
    else if (!strcmp(o, "--timeout") && v) {
      if (num(o, v, 1, 3600000, &x)) return logs_usage_err();
      c->timeout_ms = (int)x, i++;
    } else if (!strcmp(o, "--connect-timeout") && v) {
      if (num(o, v, 1, 3600000, &x)) return logs_usage_err();
      c->connect_timeout_ms = (int)x, i++;
    }
    else if (!strcmp(o, "--cacert") && v) c->cacert = v, i++;
    else if (!id && rm__cli_is_id(o)) id = o;
    else if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      fputs(k_logs_usage, stdout);
      return 0;
    } else {
      fprintf(stderr, "ringmaster logs: unexpected '%s'\n%s", o, k_logs_usage);
      return RM_CLI_EXIT_USAGE;
    }
  }
  if (!id) {
    fputs(k_logs_usage, stderr);
    return RM_CLI_EXIT_USAGE;
  }
  if (c->timeout_ms <= 0) c->timeout_ms = 10000;
  if (rm__cli_check_cacert(c) || rm__cli_resolve_token(c, token, token_file)) return RM_CLI_EXIT_USAGE;
  c->signals = &g_interrupts;
  follow_t *f = calloc(1, sizeof *f);
  json_t *job = NULL;
  char path[96];
  if (!f) abort();
  f->c = c;
  snprintf(f->id, sizeof f->id, "%s", id);
  snprintf(path, sizeof path, "/api/v1/jobs/%s", id);
  int code = rm__cli_call(c, "GET", path, NULL, &job);
  if (code == RM_CLI_EXIT_OK) {
    json_t *spec = json_object_get(job, "spec");
    long long n = rm__cli_jint(spec, "world_size") ? rm__cli_jint(spec, "world_size")
                                                  : rm__cli_jint(spec, "max_workers");
    f->nidx = (int)(n < MAX_FOLLOW ? n : MAX_FOLLOW);
    if (only >= f->nidx && only < MAX_FOLLOW) f->nidx = only + 1;
    f->only = only;
    f->prefix = only < 0;
    if (fol) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_sigint;
      sigaction(SIGINT, &sa, NULL);
    }
    json_decref(follow(f, fol, 0));
    if (g_interrupts) code = 130;
  }
  json_decref(job);
  follow_free(f);
  free(f);
  return code;
}
