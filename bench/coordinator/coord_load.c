/*
 * coord_load.c - load generator for the coordinator (benchmark, not a test).
 *
 *   rm-coord-load --ringmaster PATH [--workers N ...] [--rounds R]
 *
 * For each N: starts a fresh `ringmaster serve` (temp db, port 0), submits a
 * job of world N (launcher none), then simulates N workers from this one
 * process with the gRPC C core async API (8 channels, one completion queue):
 *   1. N concurrent Join long-polls; join time = first Join sent -> last
 *      "formed" answer received (includes sending N peer lists of N entries).
 *   2. R barrier rounds: all N call Barrier("round-k") at once; a call's
 *      latency = its send -> its answer; p50/p99 over all N*R calls, and the
 *      round time (first send -> last answer).
 * Coordinator CPU (utime+stime from /proc/PID/stat) and peak RSS (VmHWM) are
 * read before it is stopped (SIGTERM, by PID).
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"

#define NCH 8

typedef struct {
  grpc_call *call;
  grpc_byte_buffer *send, *recv;
  grpc_metadata_array md1, md2;
  grpc_status_code st;
  grpc_slice details;
  int64_t t0, t1;
} op_t;

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(len ? len : 1);
  protobuf_c_message_pack(m, buf);
  grpc_slice s = grpc_slice_new(buf, len, free);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

static ProtobufCMessage *unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d)
{
  grpc_byte_buffer_reader rd;
  if (!bb || !grpc_byte_buffer_reader_init(&rd, bb)) return NULL;
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s),
                                                  GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  grpc_byte_buffer_reader_destroy(&rd);
  return m;
}

#define BENCH_TOKEN "coord-load-token"

static void start(grpc_channel *ch, grpc_completion_queue *cq, const char *method,
                  const ProtobufCMessage *req, op_t *o, void *tag)
{
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  memset(o, 0, sizeof *o);
  o->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                     grpc_slice_from_static_string(method), NULL,
                                     gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                  gpr_time_from_seconds(600, GPR_TIMESPAN)),
                                     NULL);
  o->send = pack(req);
  grpc_metadata_array_init(&o->md1);
  grpc_metadata_array_init(&o->md2);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (!strcmp(method, "/ringmaster.v1.Jobs/SubmitJob")) { /* a mutation: the API token */
    static grpc_metadata auth;
    auth.key = grpc_slice_from_static_string("authorization");
    auth.value = grpc_slice_from_static_string("Bearer " BENCH_TOKEN);
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &auth;
  }
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = o->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &o->md1;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &o->recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &o->md2;
  ops[5].data.recv_status_on_client.status = &o->st;
  ops[5].data.recv_status_on_client.status_details = &o->details;
  o->t0 = rm__now_ns();
  if (grpc_call_start_batch(o->call, ops, 6, tag, NULL) != GRPC_CALL_OK) abort();
}

static void finish(op_t *o)
{
  grpc_call_unref(o->call);
  grpc_byte_buffer_destroy(o->send);
  if (o->recv) grpc_byte_buffer_destroy(o->recv);
  grpc_metadata_array_destroy(&o->md1);
  grpc_metadata_array_destroy(&o->md2);
  grpc_slice_unref(o->details);
}

/* Wait for n completions; returns the first failing status or 0. */
static int wait_all(grpc_completion_queue *cq, op_t *ops, int n)
{
  int bad = 0;
  for (int k = 0; k < n; k++) {
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    op_t *o = &ops[(intptr_t)ev.tag];
    o->t1 = rm__now_ns();
    if (o->st != GRPC_STATUS_OK && !bad) {
      bad = o->st;
      fprintf(stderr, "call failed: %d %.*s\n", o->st, (int)GRPC_SLICE_LENGTH(o->details),
              (const char *)GRPC_SLICE_START_PTR(o->details));
    }
  }
  return bad;
}

static int cmp_i64(const void *a, const void *b)
{
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct { pid_t pid; char addr[64]; } coord_t;

static int start_coord(const char *bin, const char *db, coord_t *c)
{
  int fds[2];
  if (pipe(fds)) return -1;
  c->pid = fork();
  if (c->pid == 0) {
    dup2(fds[1], 1);
    int null = open("/dev/null", 1);
    dup2(null, 2);
    close(fds[0]);
    execl(bin, bin, "serve", "--db", db, "--grpc", "127.0.0.1:0", "--api-token", BENCH_TOKEN,
          (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  FILE *f = fdopen(fds[0], "r");
  char line[256];
  int ok = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "ringmaster: grpc listening on %63s", c->addr) == 1) {
      ok = 0;
      break;
    }
  return ok;
}

static void coord_usage(pid_t pid, double *cpu_s, long *hwm_kb)
{
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  unsigned long ut = 0, st = 0;
  if (f && fgets(buf, sizeof buf, f)) {
    char *p = strrchr(buf, ')');
    if (p) sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
  }
  if (f) fclose(f);
  *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  *hwm_kb = 0;
  while (f && fgets(buf, sizeof buf, f))
    if (!strncmp(buf, "VmHWM:", 6)) *hwm_kb = atol(buf + 6);
  if (f) fclose(f);
}

static int submit(grpc_channel *ch, grpc_completion_queue *cq, int n, uint64_t *id,
                  char *token, size_t toklen)
{
  Ringmaster__V1__JobSpec spec = RINGMASTER__V1__JOB_SPEC__INIT;
  Ringmaster__V1__SubmitJobRequest q = RINGMASTER__V1__SUBMIT_JOB_REQUEST__INIT;
  op_t o;
  spec.name = "load";
  spec.world_size = (uint32_t)n;
  spec.launcher = "none";
  spec.heartbeat_timeout_ms = 600000;
  spec.barrier_timeout_ms = 600000;
  q.spec = &spec;
  start(ch, cq, "/ringmaster.v1.Jobs/SubmitJob", &q.base, &o, (void *)0);
  if (wait_all(cq, &o, 1)) return -1;
  Ringmaster__V1__SubmitJobResponse *r = (void *)unpack(o.recv, &ringmaster__v1__submit_job_response__descriptor);
  *id = r->job->id;
  snprintf(token, toklen, "%s", r->job->token);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  finish(&o);
  return 0;
}

static int run_one(const char *bin, int n, int rounds)
{
  char db[] = "/tmp/rm-coord-load-XXXXXX", dbfile[64], token[80], host[32], data[32], name[32];
  coord_t co;
  uint64_t job;
  if (!mkdtemp(db)) return 1;
  snprintf(dbfile, sizeof dbfile, "%s/db", db);
  if (start_coord(bin, dbfile, &co)) return 1;
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_channel *ch[NCH];
  grpc_arg arg = {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}};
  grpc_channel_args ca = {1, &arg};
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  for (int i = 0; i < NCH; i++) ch[i] = grpc_channel_create(co.addr, cr, &ca);
  grpc_channel_credentials_release(cr);
  op_t *ops = calloc((size_t)n, sizeof *ops);
  uint64_t *wid = calloc((size_t)n, sizeof *wid), gen = 0;
  int64_t *lat = calloc((size_t)n * (size_t)rounds, sizeof *lat);
  int rc = 1;
  if (submit(ch[0], cq, n, &job, token, sizeof token)) goto out;
  /* 1. joins */
  int64_t t0 = rm__now_ns();
  for (int i = 0; i < n; i++) {
    Ringmaster__V1__JoinRequest q = RINGMASTER__V1__JOIN_REQUEST__INIT;
    snprintf(host, sizeof host, "node%d", i / 8);
    snprintf(data, sizeof data, "10.0.%d.%d:5000", i / 256, i % 256);
    q.job_id = job;
    q.token = token;
    q.host = host;
    q.data_addr = data;
    q.devices = "cpu";
    q.rank_hint = -1;
    q.wait_ms = 60000;
    start(ch[i % NCH], cq, "/ringmaster.v1.Worker/Join", &q.base, &ops[i], (void *)(intptr_t)i);
  }
  if (wait_all(cq, ops, n)) goto out;
  int64_t t1 = rm__now_ns();
  for (int i = 0; i < n; i++) {
    Ringmaster__V1__JoinResponse *r = (void *)unpack(ops[i].recv, &ringmaster__v1__join_response__descriptor);
    if (!r || !r->formed) {
      fprintf(stderr, "worker %d: not formed\n", i);
      goto out;
    }
    wid[i] = r->worker_id;
    gen = r->generation;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    finish(&ops[i]);
  }
  /* 2. barrier rounds */
  double round_ms_sum = 0;
  for (int k = 0; k < rounds; k++) {
    int64_t r0 = rm__now_ns();
    snprintf(name, sizeof name, "round-%d", k);
    for (int i = 0; i < n; i++) {
      Ringmaster__V1__BarrierRequest q = RINGMASTER__V1__BARRIER_REQUEST__INIT;
      q.job_id = job;
      q.token = token;
      q.generation = gen;
      q.worker_id = wid[i];
      q.name = name;
      start(ch[i % NCH], cq, "/ringmaster.v1.Worker/Barrier", &q.base, &ops[i], (void *)(intptr_t)i);
    }
    if (wait_all(cq, ops, n)) goto out;
    round_ms_sum += (double)(rm__now_ns() - r0) / 1e6;
    for (int i = 0; i < n; i++) {
      lat[(size_t)k * (size_t)n + (size_t)i] = ops[i].t1 - ops[i].t0;
      finish(&ops[i]);
    }
  }
  qsort(lat, (size_t)n * (size_t)rounds, sizeof *lat, cmp_i64);
  size_t total = (size_t)n * (size_t)rounds;
  double cpu;
  long hwm;
  coord_usage(co.pid, &cpu, &hwm);
  printf("workers %5d | join (all formed) %8.1f ms | barrier p50 %7.2f ms p99 %7.2f ms | "
         "round %7.2f ms | coordinator cpu %6.2f s, peak rss %6.1f MiB\n",
         n, (double)(t1 - t0) / 1e6, (double)lat[total / 2] / 1e6,
         (double)lat[total * 99 / 100] / 1e6, round_ms_sum / rounds, cpu, (double)hwm / 1024);
  rc = 0;
out:
  for (int i = 0; i < NCH; i++) grpc_channel_destroy(ch[i]);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  kill(co.pid, SIGTERM);
  waitpid(co.pid, NULL, 0);
  snprintf(dbfile, sizeof dbfile, "rm -rf %s", db);
  if (system(dbfile)) fprintf(stderr, "cannot remove %s\n", db);
  free(ops);
  free(wid);
  free(lat);
  return rc;
}

int main(int argc, char **argv)
{
  const char *bin = NULL;
  int counts[8], nc = 0, rounds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ringmaster")) bin = argv[i + 1];
    else if (!strcmp(argv[i], "--workers") && nc < 8) counts[nc++] = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
  }
  if (!bin || rounds < 1) {
    fprintf(stderr, "usage: rm-coord-load --ringmaster PATH [--workers N]... [--rounds R]\n");
    return 2;
  }
  if (!nc) {
    counts[nc++] = 1024;
    counts[nc++] = 4096;
  }
  grpc_init();
  int rc = 0;
  for (int i = 0; i < nc && !rc; i++) rc = run_one(bin, counts[i], rounds);
  grpc_shutdown();
  return rc;
}
