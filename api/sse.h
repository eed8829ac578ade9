/*
 * sse.h - server-sent events hub: a bounded ring of recent events fanned out
 * to every open /api/v1/events stream.
 *
 * Wire format (text/event-stream, WHATWG HTML "server-sent events"):
 *
 *   retry: 2000\n                       once, first thing on a stream
 *   : connected\n\n                     comment, so the client sees headers
 *   id: <u64>\nevent: <type>\ndata: <one-line JSON>\n\n     one event
 *   : keep-alive\n\n                    after keepalive_ms without events
 *   id: <u64>\nevent: reset\ndata: {"reason":...}\n\n       events were lost
 *
 * Ids: one counter per hub, strictly increasing, starting at wall-clock
 * milliseconds * 1000 so ids also increase across coordinator restarts
 * (always < 2^53, exact in JavaScript). A client that reconnects with
 * Last-Event-ID gets every retained event after that id; when that id is
 * older than the ring (or from the future, i.e. another server) it first gets
 * a `reset` event telling it to re-fetch state over REST, then live events.
 *
 * Filtering: a stream opened with ?job=ID receives events whose job is ID,
 * plus global ones (job ""); without it, every event.
 *
 * Threading: publish() from any thread. Stream callbacks run on
 * libmicrohttpd's per-connection threads and block on the hub's condition
 * variable until an event or the keep-alive deadline; close() wakes them all
 * and makes them end their streams, so MHD_stop_daemon can join them.
 *
 * Limit: at most max_streams streams (each holds a connection and its
 * thread). A request takes a slot with reserve() before it builds a stream;
 * the stream then owns the slot and gives it back when MHD frees it; a
 * request that ends up with no stream gives it back with release(). At the
 * limit (or while closing) reserve() fails and http.c answers 503 +
 * Retry-After.
 *
 * Dead peers: a stream told its socket (watch()) waits in slices of at most
 * RM__SSE_PEER_CHECK_MS and between them polls the socket; a peer that
 * closed (FIN, RST; also a half-close: an SSE client never sends) ends the
 * stream within that slice, not at the next keep-alive write. A vanished
 * peer (no FIN) is left to TCP keep-alive and TCP_USER_TIMEOUT (http.c),
 * which make a write fail.
 */
#ifndef RM_API_SSE_H
#define RM_API_SSE_H

#include <stddef.h>
#include <stdint.h>

struct MHD_Response;
typedef struct rm__sse_hub rm__sse_hub_t;

#define RM__SSE_PEER_CHECK_MS 1000

/* max_streams <= 0: unlimited. */
rm__sse_hub_t *rm__sse_hub_new(size_t capacity, int keepalive_ms, int max_streams);
/* Ends every stream (callbacks return end-of-stream); publish becomes a no-op. */
void rm__sse_hub_close(rm__sse_hub_t *hub);
/* After close() and after the HTTP daemon stopped. */
void rm__sse_hub_free(rm__sse_hub_t *hub);

/* Copies job, type and data (one JSON value; newlines are split into several
 * data: lines). Returns the event's id, 0 after close. */
uint64_t rm__sse_publish(rm__sse_hub_t *hub, const char *job, const char *type,
                         const char *data);

/* Take a stream slot: 0, or -1 at the limit or while closing. */
int rm__sse_reserve(rm__sse_hub_t *hub);
/* Give back a slot that no stream took over. */
void rm__sse_release(rm__sse_hub_t *hub);
int rm__sse_max_streams(rm__sse_hub_t *hub);

/* A new streaming response; job_filter NULL or "" for all. last_id 0 = live
 * only (no replay). The caller holds a slot (reserve): the stream takes it
 * over and releases it when MHD frees the response; on NULL (allocation
 * failure) the slot stays with the caller. */
struct MHD_Response *rm__sse_response(rm__sse_hub_t *hub, const char *job_filter,
                                      uint64_t last_id);
/* The stream of response r (from rm__sse_response, not yet freed) runs on
 * socket fd: end it when the peer hangs up. No-op for fd < 0. */
void rm__sse_watch(rm__sse_hub_t *hub, struct MHD_Response *r, int fd);

/* Slots taken right now (open streams, plus requests about to open one),
 * and the last id published (for /metrics). */
int rm__sse_streams(rm__sse_hub_t *hub);
uint64_t rm__sse_last_id(rm__sse_hub_t *hub);

#endif
