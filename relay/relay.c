/*
 * relay.c - `ringmaster relay`: a host's relay. The workers of a
 * host open their Session (service.proto) here instead of at the
 * coordinator (RINGMASTER_RELAY in their environment, worker/session/
 * session_live.c); the relay carries them all as the lanes of one Relay
 * stream to the coordinator (coordinator/rpc/relay.c), so the coordinator
 * holds one gRPC stream, and reads and writes one message, per host
 * instead of per worker. Their Join calls come here too, each a lane of
 * its own (RelayIn.join), its formed answer's peer list sent once per
 * RelayResponse for all the lanes it answers (RelayResponse.shared). Every
 * other call (ReportStep, Leave, ...) still goes from the worker to the
 * coordinator directly.
 *
 * One thread and one completion queue serve both sides: a gRPC server on
 * --listen (unix:PATH or HOST:PORT) that answers only Worker/Session and
 * Worker/Join (a Join lane: its request queued as the lane's opening,
 * CLOSE posted, its answer the lane's one message and end), and
 * the client of the coordinator. Tags are a record's address with the
 * event kind in the low 3 bits.
 *
 * The relay is three files sharing relay_int.h: this one (the command,
 * the listen side and the loop), local.c (LOCAL SESSION: a worker's call
 * here and its lane) and upstream.c (UPSTREAM: the Relay streams to the
 * coordinator).
 *
 * Nothing here reads or checks tokens: each lane's messages carry the
 * worker's own job token, and the coordinator checks them as on a
 * Session. The coordinator side takes the same mutual-TLS files as the
 * worker (--tls-ca, --tls-cert, --tls-key). LISTEN SIDE:
 *   unix:PATH        plaintext: only this host's processes reach it
 *   HOST:PORT + TLS  mutual TLS with the same files: every client must
 *                    present a certificate signed by the CA, and the
 *                    relay's certificate must name HOST (the workers dial
 *                    it as they dial the coordinator). So a relay can
 *                    serve the workers of many hosts (a rack's), and the
 *                    coordinator holds one stream for all of them.
 *   HOST:PORT        plaintext, only on a loopback host (127.0.0.0/8,
 *                    ::1, localhost); any other address is refused.
 * A worker with TLS files dials a HOST:PORT relay with them, a unix:
 * relay in plaintext (worker/session/session.c).
 *
 * Every wait has a deadline: the loop polls with at most TICK_MS, and
 * SIGINT / SIGTERM end it: every lane ends UNAVAILABLE, every stream is
 * cancelled, and the queue is drained before exit.
 */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "relay.h"
#include "relay_int.h"
#include "rm_channel.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_signal.h"

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { stop_flag = sig; }
/* ---- the loop ---- */
static void dispatch(relay_t *r, const grpc_event *e)
{
  int kind = (int)((uintptr_t)e->tag & 7);
  void *p = (void *)((uintptr_t)e->tag & ~(uintptr_t)7);
  if (kind <= L_SEND) {
    lc_t *l = p;
    switch (kind) {
    case L_REQUEST: rm__lc_on_request(r, l, e->success); return; /* its reference taken there */
    case L_RECV: rm__lc_on_recv(l, e->success); break;
    case L_CLOSE: rm__lc_on_close(l); break;
    case L_SEND: rm__lc_on_send(l); break;
    }
    if (l->up && !l->up->ended) {
      rm__up_flush(r, l->up, rm__now_ns());
      rm__up_maybe_close(r, l->up);
    }
    rm__lc_unref(r, l);
    return;
  }
  up_t *u = p;
  switch (kind) {
  case U_SEND: rm__up_on_send(r, u); break;
  case U_RECV: rm__up_on_recv(u, e->success); break;
  case U_STATUS: rm__up_on_status(r, u); break;
  case U_CLOSE: break; /* its status ends it */
  }
  rm__up_unref(r, u); /* the batch's */
}

/* Does something accept connections on unix socket path? */
static int unix_alive(const char *path)
{
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof sa.sun_path) return 0;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int alive = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return alive;
}

/* HOST:PORT names a loopback host (LISTEN SIDE: plaintext only there). */
static int loopback(const char *listen)
{
  char host[256];
  const char *colon = strrchr(listen, ':');
  size_t hl = colon ? (size_t)(colon - listen) : strlen(listen);
  if (!strncmp(listen, "ipv4:", 5) || !strncmp(listen, "ipv6:", 5)) return 0;
  snprintf(host, sizeof host, "%.*s", (int)(hl < sizeof host ? hl : sizeof host - 1), listen);
  return !strncmp(host, "127.", 4) || !strcmp(host, "[::1]") || !strcmp(host, "localhost");
}

static void usage(FILE *f)
{
  fprintf(f,
          "usage: ringmaster relay --coordinator HOST:PORT [--listen ADDR]\n"
          "                        [--tls-ca PEM --tls-cert PEM --tls-key PEM]\n"
          "  A relay: workers open their Session here (RINGMASTER_RELAY=ADDR in\n"
          "  their environment) and it carries them all on one stream to the\n"
          "  coordinator. ADDR: unix:PATH (default unix:/tmp/ringmaster-relay.sock;\n"
          "  this host's workers) or HOST:PORT: mutual TLS with the TLS files (the\n"
          "  workers of many hosts; the certificate must name HOST), plaintext only\n"
          "  on a loopback HOST. The TLS files also serve the coordinator side, as a\n"
          "  worker's.\n"
          "  Prints \"ringmaster: relay listening on ADDR\" once it listens.\n");
}

int rm_relay_main(int argc, char **argv)
{
  const char *coord = getenv("RINGMASTER_COORDINATOR"), *listen = NULL;
  const char *ca = getenv("RINGMASTER_TLS_CA"), *cert = getenv("RINGMASTER_TLS_CERT"),
             *key = getenv("RINGMASTER_TLS_KEY");
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!v) {
      usage(stderr);
      return 2;
    }
    if (!strcmp(a, "--coordinator")) coord = v;
    else if (!strcmp(a, "--listen")) listen = v;
    else if (!strcmp(a, "--tls-ca")) ca = v;
    else if (!strcmp(a, "--tls-cert")) cert = v;
    else if (!strcmp(a, "--tls-key")) key = v;
    else {
      usage(stderr);
      return 2;
    }
    i++;
  }
  if (!coord || !coord[0]) {
    usage(stderr);
    return 2;
  }
  if (!listen) listen = "unix:/tmp/ringmaster-relay.sock";
  if (!strncmp(listen, "unix:", 5)) {
    if (unix_alive(listen + 5)) { /* another relay listens there: do not take its socket */
      fprintf(stderr, "ringmaster relay: a relay already listens on %s\n", listen);
      return 1;
    }
    unlink(listen + 5); /* a stale socket of a dead relay */
  }
  if (strncmp(listen, "unix:", 5) && !(ca || cert || key) && !loopback(listen)) {
    fprintf(stderr, "ringmaster relay: --listen %s is not a loopback address: give the TLS "
            "files (--tls-ca, --tls-cert, --tls-key) to serve other hosts over mutual TLS, or "
            "listen on unix:PATH\n", listen);
    return 2;
  }
  rm__log_set_tag("relay");
  rm__lc_init();
  relay_t r;
  memset(&r, 0, sizeof r);
  /* lane numbers a stream: LANES_MAX; fewer only to test the streams' turnover */
  const char *lm = getenv("RINGMASTER_RELAY_LANES");
  r.lanes_max = lm && atoi(lm) > 0 && atoi(lm) < (int)LANES_MAX ? (uint32_t)atoi(lm) : LANES_MAX;
  grpc_init();
  char err[160];
  r.ch = rm__channel_open(coord, ca, cert, key, err, sizeof err);
  if (!r.ch) {
    fprintf(stderr, "ringmaster relay: %s\n", err);
    grpc_shutdown();
    return 2;
  }
  r.cq = grpc_completion_queue_create_for_next(NULL);
  r.server = grpc_server_create(NULL, NULL);
  r.reg = grpc_server_register_method(r.server, SESSION_PATH, NULL,
                                      GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  r.reg_join = grpc_server_register_method(r.server, JOIN_PATH, NULL,
                                           GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  grpc_server_register_completion_queue(r.server, r.cq, NULL);
  int tls = strncmp(listen, "unix:", 5) && (ca || cert || key);
  grpc_server_credentials *sc = tls ? rm__server_creds_open(ca, cert, key, err, sizeof err)
                                    : grpc_insecure_server_credentials_create();
  int port = sc ? grpc_server_add_http2_port(r.server, listen, sc) : 0;
  if (sc) grpc_server_credentials_release(sc);
  if (!port) {
    if (!sc) fprintf(stderr, "ringmaster relay: %s\n", err);
    fprintf(stderr, "ringmaster relay: cannot listen on %s\n", listen);
    grpc_server_destroy(r.server);
    grpc_completion_queue_shutdown(r.cq);
    while (grpc_completion_queue_next(r.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(r.cq);
    grpc_channel_destroy(r.ch);
    grpc_shutdown();
    return 1;
  }
  grpc_server_start(r.server);
  for (int i = 0; i < REQUESTS; i++) {
    rm__lc_post_request(&r, 0);
    rm__lc_post_request(&r, 1);
  }
  rm__on_stop_signals(on_signal);
  signal(SIGPIPE, SIG_IGN);
  if (!strncmp(listen, "unix:", 5)) printf("ringmaster: relay listening on %s\n", listen);
  else {
    char host[256];
    const char *colon = strrchr(listen, ':');
    size_t hl = colon ? (size_t)(colon - listen) : strlen(listen);
    snprintf(host, sizeof host, "%.*s", (int)hl, listen);
    printf("ringmaster: relay listening on %s:%d\n", host, port);
  }
  fflush(stdout);
  RM_INFO("relay for coordinator %s on %s (%s)", coord, listen,
          tls ? "mutual TLS" : "plaintext");
  static int shutdown_tag;
  while (!stop_flag) {
    int64_t now = rm__now_ns(), wake = now + TICK_MS * 1000000LL;
    for (up_t *u = r.ups; u; u = u->next)
      if (u->nin && !u->sending && !u->ended && u->beat_ns &&
          u->beat_ns + BEAT_MS * 1000000LL < wake)
        wake = u->beat_ns + BEAT_MS * 1000000LL;
    int64_t left = wake - now;
    grpc_event e = grpc_completion_queue_next(
        r.cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                           gpr_time_from_nanos(left > 0 ? left : 0, GPR_TIMESPAN)),
        NULL);
    if (e.type == GRPC_OP_COMPLETE) dispatch(&r, &e);
    now = rm__now_ns();
    for (up_t *u = r.ups, *n; u; u = n) {
      n = u->next;
      rm__up_flush(&r, u, now);
    }
  }
  /* stop: every lane ends UNAVAILABLE, the streams are cancelled, and the
   * queue drains (each wait bounded by the shutdown's own deadline) */
  RM_INFO("relay stopping: %llu lanes over %llu coordinator streams", r.lanes_total,
          r.ups_total);
  r.stopping = 1;
  for (up_t *u = r.ups; u; u = u->next) {
    rm__up_lanes_end(u, GRPC_STATUS_UNAVAILABLE, "the relay is stopping");
    grpc_call_cancel(u->call, NULL);
  }
  grpc_server_shutdown_and_notify(r.server, r.cq, &shutdown_tag);
  int64_t dl = rm__now_ns() + 2000000000LL;
  for (int done = 0; !done;) {
    grpc_event e = grpc_completion_queue_next(
        r.cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN)),
        NULL);
    if (e.type == GRPC_OP_COMPLETE && e.tag == &shutdown_tag) done = 1;
    else if (e.type == GRPC_OP_COMPLETE) dispatch(&r, &e);
    if (!done && rm__now_ns() > dl) {
      grpc_server_cancel_all_calls(r.server);
      dl = rm__now_ns() + 2000000000LL;
    }
  }
  grpc_server_destroy(r.server);
  grpc_channel_destroy(r.ch);
  grpc_completion_queue_shutdown(r.cq);
  for (;;) {
    grpc_event e = grpc_completion_queue_next(r.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (e.type == GRPC_QUEUE_SHUTDOWN) break;
    if (e.type == GRPC_OP_COMPLETE && e.tag != &shutdown_tag) dispatch(&r, &e);
  }
  grpc_completion_queue_destroy(r.cq);
  grpc_shutdown();
  if (!strncmp(listen, "unix:", 5)) unlink(listen + 5);
  return 0;
}
