/* rm_testlib.c - one process per rank on 127.0.0.1 (design in rm_testlib.h). */
#define _GNU_SOURCE
#include "rm_testlib.h"

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"

#define RES_BYTES (sizeof(rm_test_result_t) * RM_TEST_MAX_WORLD)

void rm_test_finish(rm_test_result_t *res, rm_comm_t *c, rm_status_t st)
{
  res->status = st;
  res->failed_peer = rm_comm_failed_peer(c);
  snprintf(res->msg, sizeof res->msg, "%s", rm_comm_last_error(c));
  rm_comm_destroy(c);
}

double rm_test_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int rm_test_open_fds(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  if (d == NULL) return -1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

/* RINGMASTER_TEST_HOSTS=K: the world's ranks pretend to run on K hosts
 * (consecutive blocks of ranks): the host part of each shm offer token is
 * replaced by "simH", so pairs inside a block use shared memory and pairs
 * across blocks TCP (the pair rule, common/rm_transports.h). */
static void simulate_host(rm_test_world_t *w, int r, const char *offer)
{
  const char *k = getenv("RINGMASTER_TEST_HOSTS"), *shm = strstr(offer, "shm:");
  const char *slash = shm ? strchr(shm, '/') : NULL;
  int hosts = k ? atoi(k) : 0;
  if (hosts < 1 || !shm || !slash) {
    snprintf(w->offer[r], sizeof w->offer[r], "%s", offer);
    return;
  }
  snprintf(w->offer[r], sizeof w->offer[r], "%.*sshm:sim%d%s", (int)(shm - offer),
           offer, rm_test_host_of(w, r), slash);
}

int rm_test_host_of(const rm_test_world_t *w, int r)
{
  const char *k = getenv("RINGMASTER_TEST_HOSTS");
  int hosts = k ? atoi(k) : 0;
  if (hosts < 1) return 0;
  return r * hosts / w->world;
}

int rm_test_shm_leftovers(const rm_test_world_t *w)
{
  int left = 0;
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  if (d == NULL) return 0;
  while ((e = readdir(d)) != NULL) {
    for (int r = 0; r < w->world; r++) {
      const char *shm = strstr(w->offer[r], "shm:"), *slash = shm ? strchr(shm, '/') : NULL;
      char want[64];
      if (!slash) continue;
      snprintf(want, sizeof want, "rm-%.16s-", slash + 1);
      if (strncmp(e->d_name, want, strlen(want)) == 0) {
        fprintf(stderr, "rm_test: /dev/shm/%s of rank %d outlived its world\n",
                e->d_name, r);
        left++;
      }
    }
  }
  closedir(d);
  return left;
}

int rm_test_shm_count(const char *prefix)
{
  int n = 0;
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  if (d == NULL) return 0;
  while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

int rm_test_world_open(rm_test_world_t *w, int world)
{
  memset(w, 0, sizeof *w);
  if (world < 1 || world > RM_TEST_MAX_WORLD) {
    fprintf(stderr, "rm_test: world %d outside 1..%d\n", world, RM_TEST_MAX_WORLD);
    return -1;
  }
  w->world = world;
  w->res = mmap(NULL, RES_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (w->res == MAP_FAILED) {
    w->res = NULL;
    goto fail;
  }
  memset(w->res, 0, RES_BYTES);
  for (int r = 0; r < world; r++) {
    w->pid[r] = -1;
    if (rm_endpoint_open("127.0.0.1:0", &w->ep[r]) != RM_OK) {
      fprintf(stderr, "rm_test: cannot open endpoint %d on 127.0.0.1:0\n", r);
      goto fail;
    }
    snprintf(w->addr[r], sizeof w->addr[r], "%s", rm_endpoint_address(w->ep[r]));
    w->peers[r] = w->addr[r];
    simulate_host(w, r, rm_endpoint_transports(w->ep[r]));
    w->offers[r] = w->offer[r];
  }
  return 0;
fail:
  rm_test_world_close(w);
  return -1;
}

void rm_test_world_close(rm_test_world_t *w)
{
  for (int r = 0; r < w->world; r++) {
    rm_endpoint_close(w->ep[r]);
    w->ep[r] = NULL;
  }
  if (w->res) munmap(w->res, RES_BYTES);
  w->res = NULL;
}

void rm_test_config(const rm_test_world_t *w, int rank, rm_comm_config_t *cfg)
{
  rm_comm_config_init(cfg);
  cfg->job_id = 42;
  cfg->generation = 1;
  cfg->rank = rank;
  cfg->world = w->world;
  cfg->peers = w->peers;
  cfg->transports = w->offers;
  cfg->endpoint = w->ep[rank];
  cfg->timeout_ms = 10000;
  cfg->connect_timeout_ms = 10000;
  /* RM_TEST_DATA_KEY=1: every rank holds the same data-plane key, so a
   * suite runs over the keyed handshakes (docs/data-plane-security.md) */
  static const unsigned char key[RM_DATA_KEY_BYTES] = {
      0x6b, 0x65, 0x79, 0x65, 0x64, 0x20, 0x74, 0x65, 0x73, 0x74, 0x73, 0x01,
      0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
      0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15};
  const char *k = getenv("RM_TEST_DATA_KEY");
  if (k != NULL && k[0] == '1') cfg->data_key = key;
}

static void kill_rank(rm_test_world_t *w, int r)
{
  kill(w->pid[r], SIGKILL);
  waitpid(w->pid[r], &w->status[r], 0);
  w->killed[r] = 1;
  w->pid[r] = -1;
}

int rm_test_start(rm_test_world_t *w, rm_test_rank_fn fn, void *arg)
{
  fflush(NULL);
  for (int r = 0; r < w->world; r++) {
    pid_t p = fork();
    if (p < 0) {
      perror("rm_test: fork");
      for (int q = 0; q < r; q++) kill_rank(w, q);
      return -1;
    }
    if (p == 0) {
      for (int o = 0; o < w->world; o++)
        if (o != r) rm_endpoint_close(w->ep[o]);
      int rc = fn(w, r, arg);
      w->res[r].done = 1;
      rm_endpoint_close(w->ep[r]);
      fflush(NULL);
      exit(rc); /* not _exit: LeakSanitizer runs at exit in every rank */
    }
    w->pid[r] = p;
  }
  return 0;
}

/* The rank whose PID is p, or -1. */
static int rank_of(const rm_test_world_t *w, pid_t p)
{
  for (int r = 0; r < w->world; r++)
    if (w->pid[r] == p) return r;
  return -1;
}

int rm_test_wait(rm_test_world_t *w, int timeout_ms, int expect_killed)
{
  double end = rm_test_now_ms() + timeout_ms;
  int bad = 0, left = 0;
  for (int r = 0; r < w->world; r++) left += w->pid[r] > 0;
  while (left > 0) {
    int st, r;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0 && (r = rank_of(w, p)) >= 0) {
      w->status[r] = st;
      w->pid[r] = -1;
      left--;
      if (r != expect_killed && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
        fprintf(stderr, "rm_test: rank %d %s %d\n", r, WIFEXITED(st) ? "exited with" : "killed by signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        bad++;
      }
      continue;
    }
    if (p > 0) continue; /* a child that is not a rank: not ours to judge */
    if (rm_test_now_ms() > end) {
      for (r = 0; r < w->world; r++) {
        if (w->pid[r] <= 0) continue;
        fprintf(stderr, "rm_test: rank %d still running after %d ms: killing pid %d\n", r,
                timeout_ms, (int)w->pid[r]);
        kill_rank(w, r);
        bad++;
      }
      break;
    }
    usleep(2000);
  }
  return bad;
}

int rm_test_start_rank0(rm_test_world_t *w, rm_test_rank_fn fn, void *arg)
{
  int world = w->world, rc;
  w->world = 1;
  rc = rm_test_start(w, fn, arg);
  w->world = world;
  return rc;
}

int rm_test_wait_rank0(rm_test_world_t *w, int timeout_ms)
{
  int world = w->world, bad;
  w->world = 1;
  bad = rm_test_wait(w, timeout_ms, -1);
  w->world = world;
  return bad;
}

int rm_test_dial(const char *addr, int rcv_timeout_s)
{
  char host[64];
  int port, fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  rm__addr_split(addr, host, sizeof host, &port);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) RM_TEST_FAIL("connect");
  if (rcv_timeout_s > 0) {
    struct timeval tv = {rcv_timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  return fd;
}

void rm_test_put(int fd, const void *p, size_t n)
{
  if (write(fd, p, n) != (ssize_t)n) RM_TEST_FAIL("write");
}

/* ---- high level ---- */
typedef struct {
  rm_test_fn fn;
  void *arg;
  const rm_test_opts_t *o;
} run_ctx_t;

static int run_rank(rm_test_world_t *w, int rank, void *arg)
{
  const run_ctx_t *x = arg;
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_status_t st;
  int rc;

  rm_comm_config_t env;
  rm_comm_config_init(&env); /* RINGMASTER_TIMEOUT_MS etc. */
  rm_test_config(w, rank, &cfg);
  cfg.timeout_ms = x->o->comm_timeout_ms ? x->o->comm_timeout_ms
                   : (env.timeout_ms == 0 || env.timeout_ms > 60000) ? 60000 : env.timeout_ms;
  cfg.connect_timeout_ms = x->o->connect_timeout_ms ? x->o->connect_timeout_ms
                                                    : env.connect_timeout_ms;
  st = rm_comm_init(&cfg, &c);
  if (st != RM_OK) {
    fprintf(stderr, "rank %d: rm_comm_init: %s\n", rank, rm_status_name(st));
    return 2;
  }
  rc = x->fn(c, x->arg);
  if (rc != 0) fprintf(stderr, "rank %d: failed (%d); last error: %s\n", rank, rc, rm_comm_last_error(c));
  rm_comm_destroy(c);
  return rc;
}

int rm_test_run_opts(int world, rm_test_fn fn, void *arg, const rm_test_opts_t *o)
{
  rm_test_opts_t def = {0};
  rm_test_world_t *w = calloc(1, sizeof *w);
  run_ctx_t x = {fn, arg, o ? o : &def};
  int bad;

  if (w == NULL || rm_test_world_open(w, world) != 0) {
    free(w);
    return world > 0 ? world : 1;
  }
  if (rm_test_start(w, run_rank, &x) != 0) bad = world;
  else bad = rm_test_wait(w, x.o->timeout_ms > 0 ? x.o->timeout_ms : 120000, -1);
  bad += rm_test_shm_leftovers(w);
  rm_test_world_close(w);
  free(w);
  return bad;
}

int rm_test_run(int world, rm_test_fn fn, void *arg, int timeout_ms)
{
  rm_test_opts_t o = {.timeout_ms = timeout_ms};
  return rm_test_run_opts(world, fn, arg, &o);
}
