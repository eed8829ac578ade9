/*
 * load_parent_int.h - what rm-coord-load's parent side shares between its
 * files: coord_load.c (options, the phases of one world size, the report)
 * and load_procs.c (the processes it starts, reaps and kills: the
 * coordinator, the relays, the submit helper, the clients, and the
 * parent's end of the pipe protocol of load_int.h). Bench only.
 */
#ifndef RM_BENCH_LOAD_PARENT_INT_H
#define RM_BENCH_LOAD_PARENT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "load_int.h"

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
                * heartbeats (load_session.c SESSIONS, SESSION BARRIERS);
                * 2: a Watch per worker, unary heartbeats (load_session.c WATCHES) */
} opts_t;

typedef struct {
  pid_t pid;
  int cmd_fd, res_fd, lo, hi;
} proc_t;

/* Everything to undo, reachable from the signal handler (load_procs.c). */
extern struct load_procs {
  volatile pid_t coord;
  volatile int nprocs;
  proc_t procs[MAX_PROCS];
  char dir[64];
  int max_fd;
  volatile int nrelays;
  pid_t relays[MAX_RELAYS];      /* --real-relays */
  char relay_addr[MAX_RELAYS][112];
} load_g;

typedef struct {
  double cpu_s;
  long rss_kb, hwm_kb;
} usage_t;

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

/* ---- load_procs.c ---- */
/* Async-signal-safe: kill by PID, unlink the known files, rmdir. */
void cleanup_now(void);
/* Not async-signal-safe: every file in the temp dir, then the dir. */
void remove_dir(void);
/* SIGINT, SIGTERM, SIGHUP: clean up, then die of the signal. */
void on_signal(int sig);
/* waitpid with a deadline; SIGKILL (and reap) when it passes. */
void reap(pid_t pid, int grace_ms);
/* A process's CPU seconds, RSS and peak RSS. */
usage_t coord_usage(pid_t pid);
/* ANONYMOUS: the coordinator's RssAnon and RssFile (kB); 0 when it
 * cannot be read. */
void coord_anon(pid_t pid, long *anon_kb, long *file_kb);
/* ANONYMOUS: sample pid's RssAnon and RssFile every 5 ms from now (peaks
 * start at anon0, file0) until sampler_stop. */
void sampler_start(pid_t pid, long anon0, long file0);
void sampler_stop(void);
void sampler_peaks(long *anon_kb, long *file_kb);
/* CPU seconds of every client process so far. */
double clients_cpu(void);
/* Starts `ringmaster serve`; fills addr from its "listening" line. */
int start_coord(const char *bin, char *addr, size_t addrlen, int *out_fd);
/* --real-relays: r `ringmaster relay` processes for the coordinator at addr. */
int start_relays(const char *bin, const char *addr, int r, int *fds);
/* The submit helper process: job id and token of a job of world n. */
int submit(const char *addr, int n, int timeout_s, int gate, uint64_t *job, char *tok,
           size_t toklen);
/* P client processes, client k with its share of the n workers. */
int fork_clients(const opts_t *o, load_client_cfg_t *base, int n, int procs);
/* Broadcast cmd (the start signal), then collect every client's result
 * into ph (cap: the most latencies one client may send); none may take
 * past wait_s. 0, or -1 when a client failed (reported). */
int run_phase(load_cmd_t cmd, int wait_s, size_t cap, phase_t *ph);
/* graceful: QUIT and a grace period each; else (a failure) SIGKILL now. */
void quit_clients(int graceful);

#endif
