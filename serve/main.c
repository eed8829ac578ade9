/*
 * main.c - the `ringmaster` binary and the composition root: `ringmaster
 * serve ...` opens the coordinator (coordinator/coord.h), registers the
 * launchers (coordinator/launch/), starts the REST API (api/api.h) with
 * what it needs of the launchers (log locations, the k8s renderer) as
 * function pointers, and runs until SIGINT/SIGTERM; `ringmaster relay ...`
 * is a host's relay (relay/relay.c); every other sub-command is the CLI
 * (api/cli/).
 *
 * Prints one machine-readable line per bound port on stdout, e.g.
 *   ringmaster: grpc listening on 127.0.0.1:43123
 * (tests and scripts start it with port 0 and read the line).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coord.h"
#include "rm_log.h"
#include "rm_signal.h"
#include "rm_token.h"
#if RM_HAVE_API
#include "api.h"
#endif
#ifdef RM_HAVE_LAUNCH
#include "launch_coord.h"
#endif
#ifdef RM_HAVE_RELAY
#include "relay.h"
#endif

/* A stop signal may be delivered to any thread that does not block it (the
 * gRPC and HTTP threads were started before the handler and do not), so the
 * handler wakes the main thread through a pipe rather than relying on the main
 * thread's own sigsuspend: a SIGTERM taken by another thread just before the
 * main thread went to sleep was once lost, and `serve` kept running. */
static volatile sig_atomic_t stop_flag;
static int stop_pipe[2] = {-1, -1};
static void on_signal(int sig)
{
  int saved = errno;
  stop_flag = sig;
  if (stop_pipe[1] >= 0) (void)!write(stop_pipe[1], "x", 1);
  errno = saved;
}

static void usage(FILE *f)
{
  fprintf(f,
          "usage: ringmaster serve [--db FILE] [--grpc HOST:PORT] [--http HOST:PORT]\n"
          "                        [--heartbeat-timeout-ms N] [--barrier-timeout-ms N]\n"
          "                        [--max-message-bytes N]\n"
          "                        [--tls-cert PEM --tls-key PEM --tls-ca PEM]\n"
          "                        [--api-token T | --api-token-file F]\n"
          "                        [--read-token T | --read-token-file F] [--public-reads]\n"
          "                        [--metrics-auth]\n"
          "                        [--log-dir DIR] [--worker PATH] [--advertise HOST:PORT]\n"
          "                        [--slurm-partition P] [--slurm-relay RINGMASTER]\n"
          "                        [--k8s-image IMAGE]\n"
          "                        [--http-tls-cert PEM --http-tls-key PEM]\n"
          "  The API token guards every mutation: REST POST/DELETE (Authorization:\n"
          "  Bearer T) and gRPC Jobs.SubmitJob/CancelJob (metadata authorization:\n"
          "  Bearer T). Without --api-token, --api-token-file, RINGMASTER_API_TOKEN or\n"
          "  RINGMASTER_API_TOKEN_FILE one is generated and logged. --admin-token T is\n"
          "  the older name of --api-token T.\n"
          "  Reads (GET /api/v1/..., gRPC Jobs.GetJob/ListJobs) need the API token or\n"
          "  the read-only token (--read-token, --read-token-file, RINGMASTER_READ_TOKEN,\n"
          "  RINGMASTER_READ_TOKEN_FILE); --public-reads opens them to anyone;\n"
          "  --metrics-auth makes /metrics need a token too (docs/security.md).\n"
          "       ringmaster relay --coordinator HOST:PORT [--listen ADDR] (--help: more)\n");
#if RM_HAVE_API
  fputs(rm_cli_usage(), f);
#endif
}

/* The log folder and the worker logs in it (<dir>/job-N/worker-I.log) are
 * owner-only when ringmaster makes them; older or user-made ones that are
 * wider are named once at start (docs/security.md). */
static void warn_wide_logs(const char *dir)
{
  struct stat st;
  DIR *d;
  struct dirent *e;
  int wide = 0;
  char p[4352], first[4352] = "";
  if (stat(dir, &st) != 0) return; /* made 0700 when the first job needs it */
  if (st.st_mode & 077)
    RM_WARN("log folder %s has mode %04o: worker logs may be read by other local users "
            "(chmod 700 %s)", dir, (unsigned)(st.st_mode & 07777), dir);
  if (!(d = opendir(dir))) return;
  while ((e = readdir(d)) != NULL) {
    DIR *j;
    struct dirent *f;
    if (strncmp(e->d_name, "job-", 4) != 0) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (!(j = opendir(p))) continue;
    while ((f = readdir(j)) != NULL) {
      char q[4352];
      if (strncmp(f->d_name, "worker-", 7) != 0) continue;
      snprintf(q, sizeof q, "%s/%s/%s", dir, e->d_name, f->d_name);
      if (stat(q, &st) == 0 && (st.st_mode & 077) && wide++ == 0) snprintf(first, sizeof first, "%s", q);
    }
    closedir(j);
  }
  closedir(d);
  if (wide)
    RM_WARN("%d worker log%s under %s readable by other local users (first: %s); "
            "chmod -R go-rwx %s", wide, wide == 1 ? " is" : "s are", dir, first, dir);
}

/* 1 when "host:port" binds a loopback address only. */
static int loopback(const char *hostport)
{
  return hostport && (!strncmp(hostport, "127.", 4) || !strncmp(hostport, "localhost:", 10) ||
                      !strncmp(hostport, "[::1]:", 6));
}

static int serve(int argc, char **argv)
{
  rm_coord_options_t o;
  const char *http = NULL, *api_token = NULL, *api_token_file = NULL;
  const char *log_dir = "ringmaster-logs", *worker = NULL, *advertise = NULL;
  const char *slurm_partition = NULL, *k8s_image = NULL, *slurm_relay = NULL;
  const char *http_cert = NULL, *http_key = NULL;
  const char *admin_token = NULL, *read_token = NULL, *read_token_file = NULL;
  int public_reads = 0, metrics_auth = 0;
  rm_coord_t *c = NULL;
  char err[512], token[RM_TOKEN_MAX + 1], rtoken[RM_TOKEN_MAX + 1];
  int generated = 0;
  rm_coord_options_init(&o);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && ++i)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (OPT("--db")) o.db_path = v;
    else if (OPT("--grpc")) o.grpc_addr = v;
    else if (OPT("--http")) http = v;
    else if (OPT("--heartbeat-timeout-ms")) o.heartbeat_timeout_ms = atoi(v);
    else if (OPT("--barrier-timeout-ms")) o.barrier_timeout_ms = atoi(v);
    else if (OPT("--max-message-bytes")) o.max_message_bytes = atoi(v);
    else if (OPT("--admin-token")) admin_token = v;
    else if (OPT("--tls-cert")) o.tls_cert = v;
    else if (OPT("--tls-key")) o.tls_key = v;
    else if (OPT("--tls-ca")) o.tls_ca = v;
    else if (OPT("--api-token")) api_token = v;
    else if (OPT("--api-token-file")) api_token_file = v;
    else if (OPT("--read-token")) read_token = v;
    else if (OPT("--read-token-file")) read_token_file = v;
    else if (!strcmp(a, "--public-reads")) public_reads = 1;
    else if (!strcmp(a, "--metrics-auth")) metrics_auth = 1;
    else if (OPT("--log-dir")) log_dir = v;
    else if (OPT("--worker")) worker = v;
    else if (OPT("--advertise")) advertise = v;
    else if (OPT("--slurm-partition")) slurm_partition = v;
    else if (OPT("--slurm-relay")) slurm_relay = v;
    else if (OPT("--k8s-image")) k8s_image = v;
    else if (OPT("--http-tls-cert")) http_cert = v;
    else if (OPT("--http-tls-key")) http_key = v;
    else {
      fprintf(stderr, "ringmaster serve: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
#undef OPT
  }
  /* One token for every mutation on every interface (common/rm_token.h). */
  if (admin_token && api_token && strcmp(admin_token, api_token)) {
    fprintf(stderr, "ringmaster serve: --admin-token and --api-token differ; one token guards "
            "both REST and gRPC (give --api-token only)\n");
    return 2;
  }
  if (!api_token) api_token = admin_token;
  if (rm__token_resolve(api_token, api_token_file, token, sizeof token, &generated, err,
                        sizeof err) != 0) {
    fprintf(stderr, "ringmaster: %s\n", err);
    return 1;
  }
  if (rm__read_token_resolve(read_token, read_token_file, rtoken, sizeof rtoken, err,
                             sizeof err) != 0) {
    fprintf(stderr, "ringmaster: %s\n", err);
    return 1;
  }
  o.admin_token = token;
  o.read_token = rtoken;
  o.public_reads = public_reads;
  /* The stop signals are caught before anything starts: a SIGTERM that comes
   * while the ports open (a test reads the listening line and may stop the
   * coordinator at once; stdout may be flushed before this point) ends the
   * run cleanly after start-up instead of killing it half-way. */
  if (pipe(stop_pipe) != 0 || fcntl(stop_pipe[0], F_SETFD, FD_CLOEXEC) != 0 ||
      fcntl(stop_pipe[1], F_SETFD, FD_CLOEXEC) != 0 ||
      fcntl(stop_pipe[1], F_SETFL, O_NONBLOCK) != 0) {
    fprintf(stderr, "ringmaster: pipe: %s\n", strerror(errno));
    return 1;
  }
  rm__on_stop_signals(on_signal);
  signal(SIGPIPE, SIG_IGN);
  if (rm_coord_open(&o, &c, err, sizeof err) != RM_OK) {
    fprintf(stderr, "ringmaster: %s\n", err);
    return 1;
  }
  printf("ringmaster: grpc listening on %s\n", rm_coord_grpc_address(c));
#ifdef RM_HAVE_LAUNCH
  /* Launchers (local, slurm, k8s): the coordinator asks them to start a
   * job's workers when it is submitted and to stop them when it ends. */
  rm_launch_coord_t *lc = NULL;
  {
    rm_launch_coord_options_t lo;
    rm_launch_coord_options_init(&lo);
    lo.coord = c;
    lo.job_fail = rm_coord_job_fail;
    lo.worker_exited = rm_coord_worker_exited; /* a member loss, not a job failure */
    lo.job_note = rm_coord_job_note;           /* the worker logs' folder failing */
    lo.log_dir = log_dir;
    lo.worker_path = worker;
    lo.advertise_addr = advertise;
    lo.slurm_partition = slurm_partition;
    lo.slurm_relay = slurm_relay;
    lo.k8s_image = k8s_image;
    if (rm_launch_coord_create(&lo, &lc, err, sizeof err) != RM_OK ||
        rm_launch_coord_register(lc, c, rm_coord_register_launcher) != RM_OK) {
      fprintf(stderr, "ringmaster: launchers: %s\n", err);
      rm_launch_coord_destroy(lc, 0);
      rm_coord_close(c);
      return 1;
    }
  }
#else
  (void)log_dir; (void)worker; (void)advertise; (void)slurm_partition; (void)k8s_image;
  (void)slurm_relay;
#endif
  /* ---- REST API: start the HTTP server on `http` here and print
   *      "ringmaster: http listening on HOST:PORT". ---- */
#if RM_HAVE_API
  rm_api_t *api = NULL;
  if (http) {
    rm_api_options_t ao;
    rm_api_options_init(&ao);
    ao.listen = http;
    ao.token = token; /* resolved above: REST and gRPC share it */
    ao.read_token = rtoken;
    ao.public_reads = public_reads;
    ao.metrics_auth = metrics_auth;
    ao.tls_cert = http_cert;
    ao.tls_key = http_key;
#ifdef RM_HAVE_LAUNCH
    /* the launchers' log files and k8s renderer, for the REST API */
    ao.log_location = rm_launch_coord_log_location; /* .../workers/{index}/log */
    ao.log_ctx = lc;
    ao.k8s_render = rm_launch_k8s_manifest;          /* .../k8s-manifest */
    ao.advertise_addr = advertise;
    ao.k8s_image = k8s_image;
#endif
    if (rm_api_start(&ao, c, &api, err, sizeof err) != RM_OK) {
      fprintf(stderr, "ringmaster: %s\n", err);
      rm_coord_close(c);
      return 1;
    }
    printf("ringmaster: http listening on %s\n", rm_api_address(api));
  }
#else
  (void)http_cert;
  (void)http_key;
  if (http) fprintf(stderr, "ringmaster: --http %s: the REST API is not part of this build\n", http);
#endif
  if (generated)
    RM_WARN("no API token configured (--api-token, --api-token-file, RINGMASTER_API_TOKEN): "
            "generated one for this run; REST and gRPC mutations need 'Bearer %s'", token);
#ifdef RM_HAVE_LAUNCH
  warn_wide_logs(log_dir);
#endif
  if (public_reads && (!loopback(rm_coord_grpc_address(c)) || (http && !loopback(http))))
    RM_WARN("--public-reads: anyone who reaches this coordinator beyond loopback reads every "
            "job (commands, hosts, worker logs, events) without a token");
  fflush(stdout);
  /* The flag is checked after every wake-up; a signal that came before the
   * first poll left a byte in the pipe, so there is no lost wake-up. */
  while (!stop_flag) {
    struct pollfd pf = {.fd = stop_pipe[0], .events = POLLIN};
    (void)poll(&pf, 1, -1);
  }
  /* ---- REST API: stop the HTTP server here, before close. ---- */
#if RM_HAVE_API
  rm_api_stop(api);
#endif
#ifdef RM_HAVE_LAUNCH
  rm_launch_coord_shutdown(lc, 1);
#endif
  rm_coord_close(c);
#ifdef RM_HAVE_LAUNCH
  rm_launch_coord_destroy(lc, 0);
#endif
  memset(token, 0, sizeof token);
  memset(rtoken, 0, sizeof rtoken);
  return 0; /* the stop pipe stays open: a late signal's handler may still write */
}

int main(int argc, char **argv)
{
  rm__log_default(RM_LOG_INFO); /* a daemon's log is its record (rm_log.h) */
  if (argc >= 2 && !strcmp(argv[1], "serve")) return serve(argc - 2, argv + 2);
#ifdef RM_HAVE_RELAY
  if (argc >= 2 && !strcmp(argv[1], "relay")) return rm_relay_main(argc - 2, argv + 2);
#endif
#if RM_HAVE_API
  if (argc >= 2 && rm_cli_is_command(argv[1])) return rm_cli_main(argc, argv);
#endif
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  usage(stderr);
  return 2;
}
