/*
 * sse.h - server-sent events hub: a bounded ring of recent events fanned out
 * to every open /api/v1/events stream, backed by the coordinator's event log
 * (SQLite) for resumes older than the ring or from before a restart.
 *
 * Wire format (text/event-stream, WHATWG HTML "server-sent events"):
 *
 *   retry: 2000\n                       once, first thing on a stream
 *   : connected\n\n                     comment, so the client sees headers
 *   id: <u64>\nevent: <type>\ndata: <one-line JSON>\n\n     one event
 *   : keep-alive\n\n                    after keepalive_ms without events
 *   id: <u64>\nevent: reset\ndata: {"reason":...}\n\n       events were lost
 *
 * Ids (decimal u64, always < 2^53, exact in JavaScript). With
 * SCALE = RM__SSE_ID_SCALE = 10^6:
 *
 *   event     seq * SCALE          seq = the coordinator event's seq (data.seq):
 *                                  global, stored, stable across restarts
 *   progress  S * SCALE + k        S = newest event seq the hub knew when it
 *                                  published, k = 1, 2, ... (progress messages
 *                                  since S; saturates at SCALE - 1)
 *   reset     the id of the position the stream continues from (the newest
 *             message of the ring, or S * SCALE when the ring is empty)
 *
 * So an id names a position in the event log: ids of one hub increase in
 * publish order (but for an event whose callback arrives late), and a
 * restarted server's ids continue above the old ones. Ids of the old scheme
 * (wall-clock ms * 1000, before event ids became positions) decode to a seq from the future
 * and get `reset`.
 *
 * Resume (Last-Event-ID header or ?last_event_id=; I = the id, S = I / SCALE,
 * k = I % SCALE; F = the ring's floor: every event with seq > F entered the
 * ring and is still there, F = the coordinator's newest seq when the hub
 * first learned it (rm__sse_hub_seed) or the seq of the newest event the
 * ring dropped, whichever is larger):
 *
 *   R1 I == 0 (absent): live only.
 *   R2 S > the newest seq (the coordinator's or the hub's): not an id this
 *      log ever had (another server, the old id scheme) -> `reset`, live.
 *   R3 S >= F: continue in the ring after the newest message whose id <= I
 *      (I itself when it is still there); when none is, and progress newer
 *      than I was dropped from the ring -> `reset`, live.
 *   R4 S < F and k > 0: a progress snapshot older than the ring or from
 *      before a restart; snapshots are not stored -> `reset`, live.
 *   R5 S < F and k == 0: when event S is in the store, newest - S <=
 *      RM__SSE_REPLAY_MAX and no progress newer than I was dropped from the
 *      ring: the stored events with seq > S (filtered as below), oldest
 *      first, then the whole ring, less the events already sent. No reset:
 *      a client whose stream ended with the old process saw everything up
 *      to I. Otherwise (event S not stored, too far behind, the store
 *      failed, progress lost) -> `reset`, live.
 *
 *   A stream that falls more than the ring's capacity behind gets `reset`
 *   and continues live. After `reset` the client re-fetches state over REST
 *   (GET /api/v1/jobs/{id}/events?after= pages through the stored events).
 *
 * Filtering: a stream opened with ?job=ID receives events whose job is ID,
 * plus global ones (job ""); without it, every event. Replayed events are
 * filtered the same way.
 *
 * Replay bounds: stored events are read RM__SSE_REPLAY_BATCH at a time on
 * the stream's worker thread with no hub lock held (one coordinator section
 * per batch), formatted like the live ones (byte for byte: data is
 * rm__json_event's compact JSON), at most RM__SSE_REPLAY_MAX per resume.
 *
 * Threading: publish() from any thread; it never blocks on streams (it
 * appends to the ring and signals the waker). Stream callbacks run on
 * libmicrohttpd's worker threads (a small pool serving every connection,
 * http.c) and never wait: a stream with nothing to send parks its
 * connection (MHD_suspend_connection), so an idle stream holds no thread
 * and costs no CPU. One hub thread, the waker, resumes parked streams when
 * they have something to send (rules P1-P5 in sse.c). close() wakes every
 * parked stream, makes them all end, and joins the waker, so
 * MHD_stop_daemon (which must see no suspended connection) can run after.
 *
 * Limit: at most max_streams streams (each holds a connection, not a
 * thread). A request takes a slot with reserve() before it builds a stream;
 * the stream then owns the slot and gives it back when MHD frees it; a
 * request that ends up with no stream gives it back with release(). At the
 * limit (or while closing) reserve() fails and http.c answers 503 +
 * Retry-After.
 *
 * Dead peers: while parked, MHD does not look at a connection, so the waker
 * polls every parked socket (one poll() over all of them) every
 * RM__SSE_PEER_CHECK_MS; a peer that closed (FIN, RST; also a half-close:
 * an SSE client never sends) ends its stream within that period. A vanished
 * peer (no FIN) is found by TCP keep-alive probes (the socket then reports
 * an error to that poll) and, for a stream that is writing, by
 * TCP_USER_TIMEOUT (http.c); every stream writes at least a keep-alive
 * comment per keepalive_ms, and a failed write closes it.
 */
#ifndef RM_API_SSE_H
#define RM_API_SSE_H

#include <stddef.h>
#include <stdint.h>

struct MHD_Response;
struct MHD_Connection;
typedef struct rm__sse_hub rm__sse_hub_t;

#define RM__SSE_PEER_CHECK_MS 1000
#define RM__SSE_ID_SCALE 1000000u
#define RM__SSE_REPLAY_MAX 10000u
#define RM__SSE_REPLAY_BATCH 256

/* max_streams <= 0: unlimited. Starts the waker thread; NULL when it cannot
 * be started. */
rm__sse_hub_t *rm__sse_hub_new(size_t capacity, int keepalive_ms, int max_streams);
/* Ends every stream (callbacks return end-of-stream; parked ones are
 * resumed first) and joins the waker; publish becomes a no-op. */
void rm__sse_hub_close(rm__sse_hub_t *hub);
/* After close() and after the HTTP daemon stopped. */
void rm__sse_hub_free(rm__sse_hub_t *hub);
/* The coordinator's newest event seq, read after the hub subscribed to
 * events: sets the floor F (first call only) and raises the seq progress ids
 * carry. rm__sse_response calls it with what its caller read; calling it
 * once right after subscribing makes F exact from the start. */
void rm__sse_hub_seed(rm__sse_hub_t *hub, uint64_t newest_seq);

/* Copies job, type and data (one JSON value; newlines are split into several
 * data: lines). type "event": data is a coordinator event whose "seq" member
 * gives the id (seq * SCALE); any other type gets a progress id. Returns the
 * message's id, 0 after close. */
uint64_t rm__sse_publish(rm__sse_hub_t *hub, const char *job, const char *type,
                         const char *data);
/* The same with the seq given (seq 0: a progress id). */
uint64_t rm__sse_publish_seq(rm__sse_hub_t *hub, const char *job, const char *type,
                             const char *data, uint64_t seq);

/* Take a stream slot: 0, or -1 at the limit or while closing. */
int rm__sse_reserve(rm__sse_hub_t *hub);
/* Give back a slot that no stream took over. */
void rm__sse_release(rm__sse_hub_t *hub);
int rm__sse_max_streams(rm__sse_hub_t *hub);

/* One stored event for a replay; data is malloc'd and the hub frees it. */
typedef struct rm__sse_stored {
  uint64_t seq;
  char job[24]; /* "" for coordinator-wide events */
  char *data;   /* one JSON value */
} rm__sse_stored_t;

/* Stored events of every job with seq > after, oldest first, at most max,
 * into out[0..n). Returns n, or -1 when the store cannot be read (nothing
 * left allocated). Runs on a stream's thread, no hub lock held. */
typedef int (*rm__sse_history_fn)(void *ctx, uint64_t after, rm__sse_stored_t *out, int max);

typedef struct rm__sse_resume {
  uint64_t last_id;           /* Last-Event-ID; 0 = live only (no replay) */
  uint64_t newest_seq;        /* the coordinator's newest event seq, now */
  rm__sse_history_fn history; /* NULL: the ring only (R5 -> reset) */
  void *history_ctx;          /* borrowed; must outlive the stream */
} rm__sse_resume_t;

/* A new streaming response; job_filter NULL or "" for all; resume as above
 * (copied). The caller holds a slot (reserve): the stream takes it over and
 * releases it when MHD frees the response; on NULL (allocation failure) the
 * slot stays with the caller. */
struct MHD_Response *rm__sse_response(rm__sse_hub_t *hub, const char *job_filter,
                                      const rm__sse_resume_t *resume);
/* The stream of response r (from rm__sse_response, not yet freed) runs on
 * connection conn, socket fd (-1: unknown, no hang-up check). Must be called
 * before the response is queued: a stream without its connection cannot
 * park and ends at its first callback. */
void rm__sse_watch(rm__sse_hub_t *hub, struct MHD_Response *r, struct MHD_Connection *conn,
                   int fd);

/* Slots taken right now (open streams, plus requests about to open one),
 * and the id of the newest message published (for /metrics; 0 if none). */
int rm__sse_streams(rm__sse_hub_t *hub);
uint64_t rm__sse_last_id(rm__sse_hub_t *hub);

#endif
