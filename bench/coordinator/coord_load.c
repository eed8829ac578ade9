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
 *      ranks out of the step, not a mask: load_session.c SESSION BARRIERS
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
 * message but its barrier answers (load_session.c SESSIONS).  --session 0:
 * unary barriers and heartbeats, no streams.  --session 2 (the worker
 * library before the Session RPC): right after the Join wave every worker
 * opens a Watch call (its request asks for no event) and holds it through
 * phases 2-4, barriers and heartbeats are the unary calls of --session 0,
 * and at the end every worker cancels its Watch; each must
 * end CANCELLED (or OK: the coordinator fails the job at the first
 * cancelled Watch and ends the rest) with no message (load_session.c
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
 * older worker; load_join.c GZIP).  The clients' CPU per phase is
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
 *
 * The parent is two files sharing load_parent_int.h: this one (options,
 * the phases of one world size, the report) and load_procs.c (the
 * processes it starts and the parent's end of the pipes).
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

#include "load_parent_int.h"
#include "rm_clock.h"

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

/* K rounds of command kind (BARRIER or GATE, arg k = 0 .. K-1), each
 * started in every client at once: their latencies appended to acc's
 * buffer (acc->n_lat) and their gzip answers counted (acc->n_gzip), their
 * bounds in *t0 and *t1 and the sum of the rounds' lengths in *sum_ms. A
 * round's failures count in out (a gate step must drop exactly one worker)
 * and end the rounds. 0, or -1 when a client failed (the run ends). */
static int run_rounds(int kind, int rounds, int wait_s, size_t per, const char *what,
                      phase_t *acc, result_t *out, int64_t *t0, int64_t *t1, double *sum_ms)
{
  for (int k = 0; k < rounds; k++) {
    phase_t one = *acc;
    one.t_first = one.t_last = 0;
    if (run_phase((load_cmd_t){kind, k}, wait_s, per, &one)) return -1;
    *sum_ms += (double)(one.t_last - one.t_first) / 1e6;
    if (!k) *t0 = one.t_first;
    *t1 = one.t_last;
    out->failures += phase_failures(what, &one);
    if (kind == LOAD_CMD_GATE) {
      if (!out->failures && one.n_dropped != 1) {
        fprintf(stderr, "rm-coord-load: step %d: %d workers dropped, want 1\n", k, one.n_dropped);
        out->failures++;
      }
      out->gate_dropped += one.n_dropped;
    }
    acc->n_lat = one.n_lat;
    acc->n_gzip = one.n_gzip;
    if (out->failures) break;
  }
  return 0;
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
  usage_t u0 = coord_usage(load_g.coord);
  double k0 = clients_cpu();
  if (run_phase(cmd, wait_s, per, &ph)) goto out;
  usage_t u1 = coord_usage(load_g.coord);
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
    usage_t s0 = coord_usage(load_g.coord);
    if (stream_phase(LOAD_CMD_OPEN, wait_s, per, &ph, what, "open", &po, ph_name,
                     sizeof ph_name))
      goto out;
    out->open_ms = (double)(po.t_last - po.t_first) / 1e6;
    usage_t s1 = coord_usage(load_g.coord);
    fprintf(stderr, "rm-coord-load: %s: %d opened (%s sent) in %.1f ms; "
            "coordinator cpu %.2f s; rss %.1f MiB (peak %.1f)\n",
            o->session == 2 ? "watches" : "sessions", po.n_ok,
            o->session == 2 ? "request" : "first message", out->open_ms,
            s1.cpu_s - s0.cpu_s, (double)s1.rss_kb / 1024, (double)s1.hwm_kb / 1024);
    stream_verdict(ph_name, &po, n, "sent", out);
    if (out->failures) goto done;
    u1 = coord_usage(load_g.coord); /* the barrier phase's CPU starts here */
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
  if (run_rounds(LOAD_CMD_BARRIER, o->rounds, wait_s, per, "barrier", &pb, out, &bar_t0,
                 &bar_t1, &round_sum))
    goto out;
  if (out->failures) goto done;
  usage_t ub = coord_usage(load_g.coord);
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
    usage_t g0 = coord_usage(load_g.coord);
    double gk0 = clients_cpu();
    int64_t gt0 = 0, gt1 = 0;
    double steps_ms = 0;
    int rc_gate = run_rounds(LOAD_CMD_GATE, o->gate, wait_s, per, "step gate", &pg, out, &gt0,
                             &gt1, &steps_ms);
    out->gate_gzip = pg.n_gzip;
    if (rc_gate) goto out;
    if (out->failures) goto done;
    out->cpu_gate = coord_usage(load_g.coord).cpu_s - g0.cpu_s;
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
    usage_t h0 = coord_usage(load_g.coord);
    double hk0 = clients_cpu();
    int64_t w0 = rm__now_ns();
    cmd = (load_cmd_t){LOAD_CMD_HEARTBEAT, o->heartbeat_s};
    if (run_phase(cmd, o->heartbeat_s + 60, hb_cap, &hb)) goto out;
    double wall = (double)(rm__now_ns() - w0) / 1e9;
    mark("heartbeats", w0, rm__now_ns());
    double hb_cpu = coord_usage(load_g.coord).cpu_s - h0.cpu_s;
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
    usage_t before = coord_usage(load_g.coord);
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
  snprintf(load_g.dir, sizeof load_g.dir, "/tmp/rm-coord-load-XXXXXX");
  if (!mkdtemp(load_g.dir)) {
    load_g.dir[0] = 0;
    return -1;
  }
  int relay_fds[MAX_RELAYS];
  for (int i = 0; i < MAX_RELAYS; i++) relay_fds[i] = -1;
  if (start_coord(o->bin, addr, sizeof addr, &out_fd)) goto out;
  if (o->real_relays && start_relays(o->bin, addr, o->real_relays, relay_fds)) goto out;
  fprintf(stderr, "rm-coord-load: %d workers, %d procs: coordinator pid %d at %s\n", n, procs,
          (int)load_g.coord, addr);
  if (submit(addr, n, o->timeout_s, o->gate > 0, &job, token, sizeof token)) goto out;
  usleep(200000); /* let the submit settle before the base RSS */
  usage_t base = coord_usage(load_g.coord);
  load_client_cfg_t cfg = {.addr = addr, .job_id = job, .token = token, .world = n,
                           .timeout_s = o->timeout_s, .gzip = o->gzip,
                           .session = o->session, .relay = o->relay};
  if (getloadavg(&out->load0, 1) != 1) out->load0 = -1;
  long anon0 = 0, file0 = 0;
  coord_anon(load_g.coord, &anon0, &file0);
  if (fork_clients(o, &cfg, n, procs)) goto out;
  sampler_start(load_g.coord, anon0, file0);
  size_t per = 0;
  for (int k = 0; k < procs; k++)
    if ((size_t)(load_g.procs[k].hi - load_g.procs[k].lo) > per) per = (size_t)(load_g.procs[k].hi - load_g.procs[k].lo);
  if (run_phases(o, n, per, out)) goto out;
  usage_t end = coord_usage(load_g.coord);
  for (int i = 0; i < load_g.nrelays; i++) {
    usage_t ru = coord_usage(load_g.relays[i]);
    out->relay_mib += (double)ru.hwm_kb / 1024;
    out->relay_cpu_s += ru.cpu_s;
  }
  sampler_stop();
  long anon_peak, file_peak;
  sampler_peaks(&anon_peak, &file_peak);
  out->anon_base_mib = (double)anon0 / 1024;
  out->anon_peak_mib = (double)anon_peak / 1024;
  out->anon_per_worker_b = (double)(anon_peak - anon0) * 1024 / n;
  out->file_growth_mib = (double)(file_peak - file0) / 1024;
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
  for (int i = 0; i < load_g.nrelays; i++) { /* before the coordinator: nobody is lost */
    kill(load_g.relays[i], SIGTERM);
    reap(load_g.relays[i], 10000);
    load_g.relays[i] = 0;
    if (relay_fds[i] >= 0) close(relay_fds[i]);
  }
  load_g.nrelays = 0;
  if (load_g.coord > 0) {
    kill(load_g.coord, SIGTERM);
    reap(load_g.coord, 10000);
    load_g.coord = 0;
  }
  if (out_fd >= 0) close(out_fd);
  remove_dir();
  load_g.dir[0] = 0;
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
