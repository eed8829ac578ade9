/*
 * load_int.h - rm-coord-load internals: the parent <-> client-process pipe
 * protocol and the client entry point (module-private; bench only).
 *
 * Processes (coord_load.c does the parent side, load_client.c the client):
 *
 *   parent --fork/exec--> ringmaster serve          (killed by PID on exit)
 *   parent --fork--> submit helper (gRPC SubmitJob; writes job id + token)
 *   parent --fork--> P clients, client k simulates global workers
 *                    [lo_k, hi_k) on its own channels and completion queue
 *
 * The parent never initialises gRPC (a forked child must not inherit a live
 * gRPC core); every gRPC call is made in a child.
 *
 * Pipe protocol, one pipe pair per client, fixed-size records in host byte
 * order (parent and children are the same binary on the same machine):
 *
 *   parent -> client   load_cmd_t                        start a phase now
 *   client -> parent   load_res_t, then res.n_lat int64   latencies (ns)
 *                      then res.n_ranks uint32            ranks (JOIN only: each
 *                                                         worker's, UINT32_MAX if none)
 *
 * Every command is answered by exactly one result.  The parent writes a
 * command to every client before it reads any result, so all clients start a
 * phase within a pipe write of each other ("start signal").  A client that
 * dies shows as EOF on its result pipe, one that stops as the parent's read
 * deadline passing; either way the parent reports it, kills everything by PID
 * and exits non-zero.  EOF on the command pipe makes a client exit.
 */
#ifndef RM_BENCH_LOAD_INT_H
#define RM_BENCH_LOAD_INT_H

#include <stdint.h>
#include <sys/types.h>

enum {
  LOAD_CMD_JOIN = 1,      /* arg unused: Join wave until formed */
  LOAD_CMD_BARRIER = 2,   /* arg = round k: Barrier("round-k"); --session 1: the
                           * arrival and its answer are Session messages */
  LOAD_CMD_HEARTBEAT = 3, /* arg = seconds: every worker at 1 Hz */
  LOAD_CMD_QUIT = 4,      /* no result; the client exits 0 */
  LOAD_CMD_GATE = 5,      /* arg = step s: StepGate(s, ready) from every worker */
  LOAD_CMD_OPEN = 6,      /* arg unused: every worker opens its Session (--session 1)
                           * or its Watch (--session 2) */
  LOAD_CMD_CLOSE = 7,     /* arg unused: every worker half-closes its Session (each
                           * must end with status OK) or cancels its Watch (each
                           * must end CANCELLED); no message may have come */
};

typedef struct {
  int32_t kind;
  int32_t arg;
} load_cmd_t;

#define LOAD_MSG_MAX 192

typedef struct {
  int32_t kind;          /* echoes the command */
  int32_t n_ok;          /* calls answered OK and passing every check */
  int32_t n_err;         /* calls that ended with a non-OK status */
  int32_t n_bad;         /* OK answers that failed a check */
  int64_t t_first;       /* CLOCK_MONOTONIC ns: first call sent */
  int64_t t_last;        /* CLOCK_MONOTONIC ns: last answer received */
  uint64_t generation;   /* JOIN: the generation every answer carried */
  uint64_t peers_digest; /* JOIN: FNV-1a of the verified peer list */
  int32_t n_fast;        /* JOIN: answers checked by the byte-compare path */
  int32_t n_lat;         /* int64 latencies that follow */
  int32_t n_ranks;       /* uint32 ranks that follow (JOIN: hi - lo) */
  int32_t n_rejoin;      /* JOIN: formed=false answers, joined again */
  int32_t n_gzip;        /* JOIN, GATE: answers that came gzip-compressed */
  int32_t n_dropped;     /* GATE: answers that said dropped */
  int32_t n_late;        /* HEARTBEAT, session: messages due while the stream's
                          * previous send was still in flight (sent after it) */
  int32_t n_ended;       /* CLOSE, --session 2: Watch calls that ended OK, not
                          * CANCELLED: the coordinator ended them first (the job
                          * failed when other Watches were cancelled) */
  int64_t hwm_kb;        /* this client's VmHWM */
  char msg[LOAD_MSG_MAX]; /* first failure, "" if none */
} load_res_t;

/* What a client needs; filled by the parent before fork. */
typedef struct {
  const char *addr;     /* coordinator "host:port" */
  uint64_t job_id;
  const char *token;
  int world;            /* N: the job's world size */
  int lo, hi;           /* global worker indices simulated here */
  int channels;
  int timeout_s;        /* deadline of a Join wave / a barrier call */
  int gzip;             /* Join and StepGate ask for gzip answers (accept_gzip;
                         * load_join.c GZIP) */
  int session;          /* 1: barrier arrivals and answers and heartbeats are
                         * messages on each worker's Session stream
                         * (load_session.c SESSIONS, SESSION BARRIERS); 0: unary calls;
                         * 2: unary calls, and each worker holds a Watch
                         * (load_session.c WATCHES) */
  int relay;            /* > 0 (with session 1): each worker's Session is a lane
                         * of a relay stream carrying this many (load_relay.c) */
  int cmd_fd, res_fd;   /* pipes to the parent */
} load_client_cfg_t;

/* Child process body: serves commands until QUIT or EOF; returns the exit
 * status.  Initialises and shuts down gRPC itself. */
int load_client_main(const load_client_cfg_t *cfg);

/* Child process body of the submit helper: SubmitJob for a job of world n
 * (gate: straggler_policy backup with one backup worker, for StepGate
 * steps), writes "id token\n" to fd.  Returns the exit status. */
int load_submit_main(const char *addr, int n, int timeout_s, int gate, int fd);

/* Bearer token the parent gives `ringmaster serve` (mutations need it). */
#define LOAD_API_TOKEN "coord-load-token"

/* Full read / write with a deadline (CLOCK_MONOTONIC ns; 0 = none).
 * Return 0, or -1 (errno: ETIMEDOUT, EPIPE for EOF, or the read error). */
int load_read_full(int fd, void *buf, size_t len, int64_t deadline_ns);
int load_write_full(int fd, const void *buf, size_t len);

#endif
