/* bench_fork.c - see bench_fork.h. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_fork.h"

/* What each forked rank's endpoint offers (rm_endpoint_transports), filled
 * before the fork and read by rm_bench_comm in the children: ranks on this
 * host then use shared memory unless RINGMASTER_TRANSPORTS=tcp. Ranks
 * started with --peers (namespaces, hosts) pass none: TCP. */
static char g_offer[RM_BENCH_MAX_WORLD][256];
static const char *g_offers[RM_BENCH_MAX_WORLD];
static int g_have_offers;

int rm_bench_run_forked(int world, rm_bench_rank_fn fn, const void *arg)
{
  rm_endpoint_t *ep[RM_BENCH_MAX_WORLD];
  static char addr[RM_BENCH_MAX_WORLD][128];
  const char *peers[RM_BENCH_MAX_WORLD];
  pid_t pid[RM_BENCH_MAX_WORLD];
  int bad = 0;
  if (world < 1 || world > RM_BENCH_MAX_WORLD) return 1;
  for (int r = 0; r < world; r++) {
    if (rm_endpoint_open("127.0.0.1:0", &ep[r]) != RM_OK) return 1;
    snprintf(addr[r], sizeof addr[r], "%s", rm_endpoint_address(ep[r]));
    peers[r] = addr[r];
    snprintf(g_offer[r], sizeof g_offer[r], "%s", rm_endpoint_transports(ep[r]));
    g_offers[r] = g_offer[r];
  }
  g_have_offers = 1;
  fflush(NULL);
  for (int r = 0; r < world; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      for (int q = 0; q < world; q++)
        if (q != r) rm_endpoint_close(ep[q]);
      int rc = fn(r, world, peers, ep[r], arg);
      rm_endpoint_close(ep[r]);
      fflush(NULL);
      _exit(rc);
    }
  }
  for (int r = 0; r < world; r++) {
    int status;
    if (pid[r] > 0 && waitpid(pid[r], &status, 0) == pid[r] &&
        (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
      bad++;
      for (int q = 0; q < world; q++) /* one failed: the rest would wait */
        if (q != r && pid[q] > 0) kill(pid[q], SIGTERM);
    }
  }
  for (int r = 0; r < world; r++) rm_endpoint_close(ep[r]);
  return bad ? 1 : 0;
}

int rm_bench_rendezvous(const char *dir, int rank, int world, const char *bind_ip,
                        rm_endpoint_t **ep, const char **peers)
{
  static char addr[RM_BENCH_MAX_WORLD][160];
  char path[512], tmp[520], bind[160];
  FILE *f;
  if (world < 1 || world > RM_BENCH_MAX_WORLD) return -1;
  snprintf(bind, sizeof bind, "%s:0", bind_ip);
  if (rm_endpoint_open(bind, ep) != RM_OK) {
    fprintf(stderr, "rank %d: cannot listen on %s\n", rank, bind);
    return -1;
  }
  snprintf(path, sizeof path, "%s/%d", dir, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (!(f = fopen(tmp, "w"))) return -1;
  fprintf(f, "%s\n%s\n", rm_endpoint_address(*ep), rm_endpoint_transports(*ep));
  if (fclose(f) != 0 || rename(tmp, path) != 0) return -1;
  for (int r = 0; r < world; r++) {
    int ok = 0;
    snprintf(path, sizeof path, "%s/%d", dir, r);
    for (int tries = 0; !ok && tries < 6000; tries++) {
      if ((f = fopen(path, "r")) != NULL) {
        ok = fgets(addr[r], sizeof addr[r], f) && fgets(g_offer[r], sizeof g_offer[r], f);
        fclose(f);
      }
      if (!ok) usleep(10000);
    }
    if (!ok) {
      fprintf(stderr, "rank %d: no rendezvous file %s\n", rank, path);
      return -1;
    }
    addr[r][strcspn(addr[r], "\n")] = 0;
    g_offer[r][strcspn(g_offer[r], "\n")] = 0;
    peers[r] = addr[r];
    g_offers[r] = g_offer[r];
  }
  g_have_offers = 1;
  return 0;
}

rm_status_t rm_bench_comm(int rank, int world, const char **peers, rm_endpoint_t *ep,
                          int timeout_ms, rm_comm_t **out)
{
  rm_comm_config_t cfg;
  rm_comm_config_init(&cfg);
  cfg.job_id = 1;
  cfg.generation = 1;
  cfg.rank = rank;
  cfg.world = world;
  cfg.peers = peers;
  cfg.transports = g_have_offers ? g_offers : NULL;
  cfg.endpoint = ep;
  if (timeout_ms > 0 && cfg.timeout_ms < timeout_ms) cfg.timeout_ms = timeout_ms;
  if (cfg.connect_timeout_ms == 0) cfg.connect_timeout_ms = 60000;
  rm_status_t st = rm_comm_init(&cfg, out);
  if (st != RM_OK) fprintf(stderr, "rank %d: rm_comm_init: %s\n", rank, rm_status_name(st));
  return st;
}

double rm_bench_now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int rm_bench_cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
