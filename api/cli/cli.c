/*
 * cli.c - `ringmaster submit|jobs|job|cancel|k8s-manifest|run|logs`: a REST
 * client of the coordinator's /api/v1 over libcurl (http:// or https://,
 * see http_client.h).
 * Human-readable tables by default, the server's JSON with --json. `run`
 * and `logs` live in run.c (cli_int.h).
 *
 * Exit codes (RM_CLI_EXIT_* in api.h, also printed by the usage text):
 *   0 ok (also --help/-h on any subcommand: usage on stdout), 1 server
 *   error (5xx, other), 2 usage (unknown option, missing or malformed
 *   argument such as --limit abc, unreadable input file: nothing was sent),
 *   3 not found (404), 4 unauthorized (401/403), 5 server unreachable or no
 *   answer in time, 6 request refused (400/409/413: bad spec, job already
 *   finished, a value the server's rules refuse, ...)
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "cli_int.h"
#include "http_client.h"
#include "table.h"

static const char k_usage[] =
    "usage: ringmaster COMMAND [options]\n"
    "  submit FILE|-            submit a job spec (JSON; '-' reads stdin)\n"
    "  jobs [--state S] [--limit N] [--offset N]\n"
    "                           list jobs, newest first (--limit 1..1000,\n"
    "                           default 100)\n"
    "  job ID                   show a job, its workers and open barriers\n"
    "  cancel ID [--reason T]   cancel a job\n"
    "  k8s-manifest ID [--image IMG] [--namespace NS]\n"
    "                           print the Kubernetes manifests (Secret with the\n"
    "                           worker token, headless Service, Indexed Job) that\n"
    "                           run the job's workers: pipe to kubectl apply -f -\n"
    "  run -n N [run options] -- PROG ARGS...\n"
    "                           run PROG as a command job of N workers: submit,\n"
    "                           stream progress and the workers' output ([i] =\n"
    "                           launch index, the rank of the first generation)\n"
    "                           until it ends; exit 0 succeeded, 1 failed, 130\n"
    "                           after Ctrl-C (which cancels the job). With no\n"
    "                           --server, no RINGMASTER_SERVER and nothing at the\n"
    "                           default address, starts a private coordinator\n"
    "                           (state and logs in ./ringmaster-run/)\n"
    "      run options: --launcher local|slurm  --on-failure fail|shrink|replace\n"
    "                   --min-workers N  --max-restarts N  --steps N  --name NAME\n"
    "                   --env K=V (repeatable)  --workdir DIR  --algorithm A\n"
    "                   --heartbeat-timeout-ms N  --secure-aggregation JSON\n"
    "  logs ID [--follow] [--worker N]\n"
    "                           print a job's worker logs (every worker, lines\n"
    "                           prefixed [i], or worker N alone); --follow until\n"
    "                           the job ends\n"
    "options:\n"
    "  --server URL     coordinator REST address, http:// or https:// (env\n"
    "                   RINGMASTER_SERVER, default http://127.0.0.1:8080)\n"
    "  --token T        API token for submit/cancel/k8s-manifest (env RINGMASTER_API_TOKEN)\n"
    "  --token-file F   read the token from F (env RINGMASTER_API_TOKEN_FILE)\n"
    "                   reads need a token too: without an API token the read-only\n"
    "                   one is sent (env RINGMASTER_READ_TOKEN, RINGMASTER_READ_TOKEN_FILE)\n"
    "  --json           print the server's JSON instead of tables\n"
    "  --timeout MS     deadline for the whole request (default 10000)\n"
    "  --help, -h       this text (on stdout, exit 0), after any command\n"
    "  --connect-timeout MS\n"
    "                   deadline for connecting, TCP and TLS (default: --timeout)\n"
    "  --cacert FILE    trust the CA certificates in FILE (PEM) for https://\n"
    "                   instead of the system's (env RINGMASTER_CACERT)\n"
    "  proxies: http_proxy, https_proxy, no_proxy (the usual variables)\n"
    "exit codes: 0 ok, 1 server error, 2 usage, 3 not found, 4 unauthorized,\n"
    "            5 server unreachable, 6 request refused (bad spec, conflict)\n";

const char *rm_cli_usage(void) { return k_usage; }

int rm_cli_is_command(const char *cmd)
{
  static const char *const cmds[] = {"submit", "jobs", "job", "cancel", "k8s-manifest",
                                     "run", "logs", NULL};
  for (int i = 0; cmd && cmds[i]; i++)
    if (strcmp(cmd, cmds[i]) == 0) return 1;
  return 0;
}

static int exit_for(int status)
{
  if (status >= 200 && status < 300) return RM_CLI_EXIT_OK;
  if (status == 401 || status == 403) return RM_CLI_EXIT_UNAUTHORIZED;
  if (status == 404) return RM_CLI_EXIT_NOT_FOUND;
  if (status == 400 || status == 409 || status == 413) return RM_CLI_EXIT_INVALID;
  return RM_CLI_EXIT_SERVER;
}

static char *read_input(const char *path, size_t *len)
{
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  char *buf = NULL;
  size_t cap = 0, n = 0;
  if (f == NULL) return NULL;
  for (;;) {
    if (n == cap) {
      char *nb;
      cap = cap ? cap * 2 : 4096;
      if (cap > (16u << 20) || (nb = realloc(buf, cap + 1)) == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (f != stdin) fclose(f);
  if (buf) buf[n] = '\0';
  *len = n;
  return buf;
}

rm__http_opts_t rm__cli_http_opts(const cli_t *c, int timeout_ms)
{
  rm__http_opts_t o;
  memset(&o, 0, sizeof o);
  o.token = c->token;
  o.cacert = c->cacert && *c->cacert ? c->cacert : NULL;
  o.timeout_ms = timeout_ms;
  o.connect_timeout_ms = c->connect_timeout_ms;
  o.signals = c->signals;
  return o;
}

int rm__cli_check_cacert(const cli_t *c)
{
  if (c->cacert == NULL || *c->cacert == '\0' || access(c->cacert, R_OK) == 0) return 0;
  fprintf(stderr, "ringmaster: cannot read the CA certificate file %s: %s\n", c->cacert,
          strerror(errno));
  return -1;
}

/* One request; on an HTTP error prints the server's error message. Returns
 * the exit code and, on 2xx, the reply in *r (free r->body). */
int rm__cli_call_raw(cli_t *c, const char *method, const char *path, const char *body,
                    rm__http_reply_t *r)
{
  char err[256];
  json_t *j;
  int code;

  rm__http_opts_t o = rm__cli_http_opts(c, c->timeout_ms);

  if (rm__http_request(c->server, method, path, &o, body, body ? strlen(body) : 0, r, err,
                       sizeof err) != 0) {
    fprintf(stderr, "ringmaster: %s: %s\n", c->server, err);
    return RM_CLI_EXIT_UNREACHABLE;
  }
  code = exit_for(r->status);
  if (code != RM_CLI_EXIT_OK) {
    j = json_loadb(r->body, r->len, 0, NULL);
    json_t *e = json_object_get(json_object_get(j, "error"), "message");
    json_t *fld = json_object_get(json_object_get(j, "error"), "field");
    fprintf(stderr, "ringmaster: HTTP %d: %s%s%s%s\n", r->status,
            json_is_string(e) ? json_string_value(e) : r->body, json_is_string(fld) ? " (field " : "",
            json_is_string(fld) ? json_string_value(fld) : "", json_is_string(fld) ? ")" : "");
    json_decref(j);
    free(r->body);
    r->body = NULL;
  }
  return code;
}

/* call_raw, then the parsed JSON body in *out (new reference) on 2xx. */
int rm__cli_call(cli_t *c, const char *method, const char *path, const char *body, json_t **out)
{
  rm__http_reply_t r;
  int code;

  *out = NULL;
  code = rm__cli_call_raw(c, method, path, body, &r);
  if (code != RM_CLI_EXIT_OK) return code;
  *out = json_loadb(r.body, r.len, 0, NULL);
  if (*out == NULL) {
    fprintf(stderr, "ringmaster: the server's answer is not JSON\n");
    code = RM_CLI_EXIT_SERVER;
  }
  free(r.body);
  return code;
}

static void print_json(json_t *j)
{
  char *s = json_dumps(j, JSON_INDENT(2));
  if (s) puts(s);
  free(s);
}

const char *rm__cli_jstr(json_t *o, const char *k)
{
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : "";
}

long long rm__cli_jint(json_t *o, const char *k)
{
  return json_integer_value(json_object_get(o, k));
}

/* "  command     python3 train.py  (env K=V ...; workdir D)" for command
 * jobs; arguments with spaces or quotes are shown JSON-quoted. */
static void print_command(json_t *spec)
{
  json_t *cmd = json_object_get(spec, "command"), *a, *env = json_object_get(spec, "env");
  const char *k;
  size_t i;
  if (!json_is_array(cmd) || json_array_size(cmd) == 0) return;
  printf("  command    ");
  json_array_foreach(cmd, i, a) {
    const char *s = json_string_value(a);
    if (s && *s && !strpbrk(s, " \t\n\"'\\")) printf(" %s", s);
    else {
      char *q = json_dumps(a, JSON_ENCODE_ANY);
      printf(" %s", q ? q : "?");
      free(q);
    }
  }
  printf("\n");
  if (json_object_size(env)) {
    printf("  env        ");
    json_object_foreach(env, k, a) printf(" %s=%s", k, json_string_value(a));
    printf("\n");
  }
  if (*rm__cli_jstr(spec, "workdir")) printf("  workdir     %s\n", rm__cli_jstr(spec, "workdir"));
}

static void fmt_age(char *buf, size_t len, long long ms_epoch)
{
  long long s = ms_epoch ? (long long)time(NULL) - ms_epoch / 1000 : -1;
  if (s < 0) snprintf(buf, len, "-");
  else if (s < 120) snprintf(buf, len, "%llds ago", s);
  else if (s < 7200) snprintf(buf, len, "%lldm ago", s / 60);
  else if (s < 172800) snprintf(buf, len, "%lldh ago", s / 3600);
  else snprintf(buf, len, "%lldd ago", s / 86400);
}

static void print_jobs(json_t *arr)
{
  static const char *const hdr[] = {">ID", "NAME", "STATE", ">WORKERS", ">STEP", "CREATED",
                                    "REASON"};
  rm__table_t *t = rm__table_new(7, hdr);
  size_t i;
  json_t *j;
  json_array_foreach(arr, i, j) {
    char id[24], workers[32], step[48], age[32];
    json_t *spec = json_object_get(j, "spec");
    long long size = rm__cli_jint(spec, "world_size") ? rm__cli_jint(spec, "world_size") : rm__cli_jint(spec, "max_workers");
    snprintf(id, sizeof id, "%lld", rm__cli_jint(j, "id"));
    snprintf(workers, sizeof workers, "%lld/%lld", rm__cli_jint(j, "workers_alive"), size);
    if (rm__cli_jint(j, "steps_total")) /* 0: a command job's program did not tell it */
      snprintf(step, sizeof step, "%lld/%lld", rm__cli_jint(j, "step"), rm__cli_jint(j, "steps_total"));
    else
      snprintf(step, sizeof step, "%lld", rm__cli_jint(j, "step"));
    fmt_age(age, sizeof age, rm__cli_jint(j, "created_ms"));
    const char *row[] = {id, rm__cli_jstr(spec, "name"), rm__cli_jstr(j, "state"), workers, step, age,
                         rm__cli_jstr(j, "reason")};
    rm__table_row(t, row);
  }
  rm__table_print(t, stdout);
  rm__table_free(t);
}

/* "  result      accuracy 0.9722  test_loss 0.1076  ...": the job's result
 * object (GET /jobs/{id}), numbers and strings; nested values are left to
 * --json. Nothing when the job has no result. */
static void print_result(json_t *r)
{
  const char *k;
  json_t *v;
  int n = 0;
  if (!json_is_object(r)) return;
  printf("  result     ");
  json_object_foreach(r, k, v) {
    if (json_is_integer(v)) printf(" %s %lld", k, (long long)json_integer_value(v));
    else if (json_is_real(v)) printf(" %s %.4f", k, json_real_value(v));
    else if (json_is_string(v)) printf(" %s %s", k, json_string_value(v));
    else continue;
    n++;
  }
  printf("%s\n", n ? "" : " (see --json)");
}

/* "  aggregation krum  f 1  clip_norm 5": the method, and
 * only the parameters that are set; "mean" alone for the default. */
static void print_aggregation(json_t *spec)
{
  json_t *a = json_object_get(spec, "aggregation");
  static const char *const keys[] = {"f", "m", "clip_norm", "tau", "iterations"};
  if (!json_is_object(a)) return;
  printf("  aggregation %s", *rm__cli_jstr(a, "method") ? rm__cli_jstr(a, "method") : "mean");
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    json_t *v = json_object_get(a, keys[i]);
    if (json_is_number(v) && json_number_value(v) != 0)
      printf("  %s %g", keys[i], json_number_value(v));
  }
  printf("\n");
}

static void print_job(json_t *j)
{
  json_t *spec = json_object_get(j, "spec");
  printf("job %lld  %s\n", rm__cli_jint(j, "id"), rm__cli_jstr(spec, "name"));
  printf("  state       %s%s%s\n", rm__cli_jstr(j, "state"), *rm__cli_jstr(j, "reason") ? "  - " : "",
         rm__cli_jstr(j, "reason"));
  char total[32] = ""; /* steps_total 0: a command job's program did not tell it */
  if (rm__cli_jint(j, "steps_total"))
    snprintf(total, sizeof total, " of %lld", rm__cli_jint(j, "steps_total"));
  printf("  progress    step %lld%s, generation %lld, %lld of %lld workers alive\n",
         rm__cli_jint(j, "step"), total, rm__cli_jint(j, "generation"), rm__cli_jint(j, "workers_alive"),
         rm__cli_jint(j, "workers_joined"));
  printf("  workload    %s (%s)  algorithm %s  dtype %s  launcher %s\n", rm__cli_jstr(spec, "workload"),
         *rm__cli_jstr(spec, "workload_options") ? rm__cli_jstr(spec, "workload_options") : "defaults",
         rm__cli_jstr(spec, "algorithm"), rm__cli_jstr(spec, "dtype"), rm__cli_jstr(spec, "launcher"));
  print_aggregation(spec);
  print_command(spec);
  if (*rm__cli_jstr(j, "token")) printf("  worker token %s (shown once)\n", rm__cli_jstr(j, "token"));
  print_result(json_object_get(j, "result"));
}

static void print_workers(json_t *arr)
{
  static const char *const hdr[] = {">RANK", "STATE", "HOST", "DATA ADDR", ">STEP",
                                    ">STEP MS", ">HEARTBEAT", "FLAGS"};
  rm__table_t *t = rm__table_new(8, hdr);
  size_t i;
  json_t *w;
  json_array_foreach(arr, i, w) {
    char rank[16], step[24], ms[32], hb[32];
    json_t *sm = json_object_get(w, "step_ms");
    snprintf(rank, sizeof rank, "%lld", rm__cli_jint(w, "rank"));
    snprintf(step, sizeof step, "%lld", rm__cli_jint(w, "step"));
    snprintf(ms, sizeof ms, json_is_number(sm) ? "%.1f" : "-", json_number_value(sm));
    snprintf(hb, sizeof hb, "%.1fs", (double)rm__cli_jint(w, "ms_since_heartbeat") / 1000.0);
    int slow = json_is_true(json_object_get(w, "straggler"));
    int sus = json_is_true(json_object_get(w, "suspect"));
    const char *flags = slow && sus ? "straggler,suspect" : slow ? "straggler" : sus ? "suspect" : "";
    const char *row[] = {rank, rm__cli_jstr(w, "state"), rm__cli_jstr(w, "host"), rm__cli_jstr(w, "data_addr"), step, ms,
                         hb, flags};
    rm__table_row(t, row);
  }
  printf("\nworkers\n");
  rm__table_print(t, stdout);
  rm__table_free(t);
}

static void print_barriers(json_t *arr)
{
  size_t i, k;
  json_t *b, *m;
  json_array_foreach(arr, i, b) {
    if (strcmp(rm__cli_jstr(b, "state"), "open") != 0) continue;
    printf("\nbarrier '%s' (generation %lld): %lld of %lld arrived; waiting for", rm__cli_jstr(b, "name"),
           rm__cli_jint(b, "generation"), rm__cli_jint(b, "arrived"), rm__cli_jint(b, "expected"));
    json_array_foreach(json_object_get(b, "missing"), k, m)
      printf("%s rank %lld (step %lld, %s, silent %.1fs)", k ? "," : "", rm__cli_jint(m, "rank"),
             rm__cli_jint(m, "step"), rm__cli_jstr(m, "state"), (double)rm__cli_jint(m, "ms_since_heartbeat") / 1000.0);
    printf("\n");
  }
}

static int cmd_job(cli_t *c, const char *id)
{
  char path[160];
  json_t *job, *w = NULL, *b = NULL;
  int code;
  snprintf(path, sizeof path, "/api/v1/jobs/%s", id);
  code = rm__cli_call(c, "GET", path, NULL, &job);
  if (code) return code;
  snprintf(path, sizeof path, "/api/v1/jobs/%s/workers", id);
  code = rm__cli_call(c, "GET", path, NULL, &w);
  snprintf(path, sizeof path, "/api/v1/jobs/%s/barriers", id);
  if (!code) code = rm__cli_call(c, "GET", path, NULL, &b);
  if (!code && c->json) {
    json_object_set(job, "workers", json_object_get(w, "workers"));
    json_object_set(job, "barriers", json_object_get(b, "barriers"));
    print_json(job);
  } else if (!code) {
    print_job(job);
    print_workers(json_object_get(w, "workers"));
    print_barriers(json_object_get(b, "barriers"));
  }
  json_decref(job);
  json_decref(w);
  json_decref(b);
  return code;
}

static int cmd_jobs(cli_t *c)
{
  char path[256];
  json_t *r;
  int code;
  snprintf(path, sizeof path, "/api/v1/jobs?limit=%s&offset=%s%s%s", c->limit ? c->limit : "100",
           c->offset ? c->offset : "0", c->state ? "&state=" : "", c->state ? c->state : "");
  code = rm__cli_call(c, "GET", path, NULL, &r);
  if (code) return code;
  if (c->json) print_json(r);
  else print_jobs(json_object_get(r, "jobs"));
  json_decref(r);
  return code;
}

static int cmd_submit(cli_t *c, const char *file)
{
  size_t len = 0;
  char *body = read_input(file, &len);
  json_t *r;
  int code;
  if (body == NULL) {
    fprintf(stderr, "ringmaster: cannot read job spec %s\n", file);
    return RM_CLI_EXIT_USAGE;
  }
  code = rm__cli_call(c, "POST", "/api/v1/jobs", body, &r);
  free(body);
  if (code) return code;
  if (c->json) print_json(r);
  else print_job(r);
  json_decref(r);
  return code;
}

static int cmd_cancel(cli_t *c, const char *id)
{
  char path[160];
  json_t *r, *body = json_pack("{s:s}", "reason", c->reason ? c->reason : "cancelled from the CLI");
  char *text = json_dumps(body, JSON_COMPACT);
  int code;
  json_decref(body);
  snprintf(path, sizeof path, "/api/v1/jobs/%s/cancel", id);
  code = rm__cli_call(c, "POST", path, text ? text : "{}", &r);
  free(text);
  if (code) return code;
  if (c->json) print_json(r);
  else printf("job %lld %s\n", rm__cli_jint(r, "id"), rm__cli_jstr(r, "state"));
  json_decref(r);
  return code;
}

/* Append "&name=value" (value percent-encoded) to path. */
static void add_query(char *path, size_t len, const char *name, const char *value)
{
  size_t n = strlen(path);
  if (value == NULL) return;
  n += (size_t)snprintf(path + n, n < len ? len - n : 0, "%c%s=", strchr(path, '?') ? '&' : '?',
                        name);
  for (const unsigned char *p = (const unsigned char *)value; *p && n + 4 < len; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("-._~", *p))
      path[n++] = (char)*p;
    else
      n += (size_t)snprintf(path + n, len - n, "%%%02X", *p);
  }
  path[n < len ? n : len - 1] = '\0';
}

static int cmd_k8s_manifest(cli_t *c, const char *id)
{
  char path[1024];
  rm__http_reply_t r;
  int code;
  snprintf(path, sizeof path, "/api/v1/jobs/%s/k8s-manifest", id);
  add_query(path, sizeof path, "image", c->image);
  add_query(path, sizeof path, "namespace", c->ns);
  code = rm__cli_call_raw(c, "GET", path, NULL, &r);
  if (code) return code;
  fwrite(r.body, 1, r.len, stdout);
  free(r.body);
  return fflush(stdout) == 0 ? code : RM_CLI_EXIT_SERVER;
}

enum { OPT_CACERT = 1000, OPT_CONNECT_TIMEOUT };

/* An option's value as a decimal integer in lo..hi; -1 (printed why) when
 * it is not one: a usage error, found before anything is sent. */
static int opt_num(const char *opt, const char *v, long long lo, long long hi, long long *out)
{
  char *end;
  long long x;
  errno = 0;
  x = strtoll(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || x < lo || x > hi) {
    fprintf(stderr, "ringmaster: --%s needs an integer in %lld..%lld, got '%s'\n", opt, lo, hi,
            v);
    return -1;
  }
  *out = x;
  return 0;
}

/* Returns 0, 1 after --help/-h (usage printed on stdout) or -1 on a bad
 * option (the caller prints the usage on stderr). */
int rm__cli_parse_args(cli_t *c, int argc, char **argv)
{
  static const struct option opts[] = {
      {"server", required_argument, 0, 's'}, {"token", required_argument, 0, 't'},
      {"token-file", required_argument, 0, 'f'}, {"json", no_argument, 0, 'j'},
      {"timeout", required_argument, 0, 'T'}, {"state", required_argument, 0, 'S'},
      {"limit", required_argument, 0, 'l'}, {"offset", required_argument, 0, 'o'},
      {"reason", required_argument, 0, 'r'}, {"image", required_argument, 0, 'i'},
      {"namespace", required_argument, 0, 'n'}, {"help", no_argument, 0, 'h'},
      {"cacert", required_argument, 0, OPT_CACERT},
      {"connect-timeout", required_argument, 0, OPT_CONNECT_TIMEOUT}, {0, 0, 0, 0}};
  const char *token = NULL, *token_file = NULL;
  int ch;
  long long x;

  optind = 1;
  while ((ch = getopt_long(argc, argv, "s:t:f:jT:S:l:o:r:i:n:h", opts, NULL)) != -1) {
    switch (ch) {
    case 's': c->server = optarg; break;
    case 't': token = optarg; break;
    case 'f': token_file = optarg; break;
    case 'j': c->json = 1; break;
    case 'T':
      if (opt_num("timeout", optarg, 1, 3600000, &x)) return -1;
      c->timeout_ms = (int)x;
      break;
    case 'S': c->state = optarg; break;
    case 'l': /* GET /api/v1/jobs: limit 1..1000 (openapi.json) */
      if (opt_num("limit", optarg, 1, 1000, &x)) return -1;
      c->limit = optarg;
      break;
    case 'o':
      if (opt_num("offset", optarg, 0, INT64_MAX, &x)) return -1;
      c->offset = optarg;
      break;
    case 'r': c->reason = optarg; break;
    case 'i': c->image = optarg; break;
    case 'n': c->ns = optarg; break;
    case OPT_CACERT: c->cacert = optarg; break;
    case OPT_CONNECT_TIMEOUT:
      if (opt_num("connect-timeout", optarg, 1, 3600000, &x)) return -1;
      c->connect_timeout_ms = (int)x;
      break;
    case 'h':
      fputs(k_usage, stdout);
      return 1;
    default: return -1;
    }
  }
  if (c->timeout_ms <= 0) c->timeout_ms = 10000;
  if (rm__cli_check_cacert(c) != 0) return -1;
  return rm__cli_resolve_token(c, token, token_file);
}

int rm__cli_resolve_token(cli_t *c, const char *token, const char *file)
{
  char err[256];
  int gen;
  if ((token || file || getenv("RINGMASTER_API_TOKEN") || getenv("RINGMASTER_API_TOKEN_FILE")) &&
      rm__auth_resolve(token, file, c->token, sizeof c->token, &gen, err, sizeof err) != 0) {
    fprintf(stderr, "ringmaster: %s\n", err);
    return -1;
  }
  /* no API token: the read-only one, if any, so that reads work (a server
   * refuses it for submit and cancel) */
  if (!c->token[0] &&
      rm__read_token_resolve(NULL, NULL, c->token, sizeof c->token, err, sizeof err) != 0) {
    fprintf(stderr, "ringmaster: %s\n", err);
    return -1;
  }
  return 0;
}

int rm__cli_is_id(const char *s)
{
  if (s == NULL || *s == '\0' || strlen(s) > 20) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

static int cli_main(int argc, char **argv)
{
  cli_t c;
  const char *cmd = argc > 1 ? argv[1] : "";
  const char *arg;

  memset(&c, 0, sizeof c);
  c.server = getenv("RINGMASTER_SERVER");
  if (c.server == NULL || *c.server == '\0') c.server = "http://127.0.0.1:8080";
  c.cacert = getenv("RINGMASTER_CACERT");
  if (!rm_cli_is_command(cmd)) goto usage;
  if (strcmp(cmd, "run") == 0) return rm__cli_run(&c, argc - 1, argv + 1);
  if (strcmp(cmd, "logs") == 0) return rm__cli_logs(&c, argc - 1, argv + 1);
  switch (rm__cli_parse_args(&c, argc - 1, argv + 1)) {
  case 0: break;
  case 1: return RM_CLI_EXIT_OK; /* --help */
  default: goto usage;
  }
  /* getopt ran over argv + 1 (argc - 1 entries) and moved operands last. */
  arg = optind < argc - 1 ? argv[1 + optind] : NULL;
  if (optind + (arg != NULL) != argc - 1) goto usage; /* stray extra arguments */
  if (strcmp(cmd, "jobs") == 0 && arg == NULL) return cmd_jobs(&c);
  if (strcmp(cmd, "submit") == 0 && arg) return cmd_submit(&c, arg);
  if (strcmp(cmd, "job") == 0 && rm__cli_is_id(arg)) return cmd_job(&c, arg);
  if (strcmp(cmd, "cancel") == 0 && rm__cli_is_id(arg)) return cmd_cancel(&c, arg);
  if (strcmp(cmd, "k8s-manifest") == 0 && rm__cli_is_id(arg)) return cmd_k8s_manifest(&c, arg);
usage:
  fputs(k_usage, stderr);
  return RM_CLI_EXIT_USAGE;
}

int rm_cli_main(int argc, char **argv)
{
  int code;
  if (rm__http_init() != 0) { /* curl_global_init, once, before anything else */
    fprintf(stderr, "ringmaster: cannot initialise libcurl\n");
    return RM_CLI_EXIT_UNREACHABLE;
  }
  code = cli_main(argc, argv);
  rm__http_cleanup();
  return code;
}
