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
 */
#ifndef RM_API_SSE_H
#define RM_API_SSE_H

#include <stddef.h>
#include <stdint.h>

struct MHD_Response;
typedef struct rm__sse_hub rm__sse_hub_t;

rm__sse_hub_t *rm__sse_hub_new(size_t capacity, int keepalive_ms);
/* Ends every stream (callbacks return end-of-stream); publish becomes a no-op. */
void rm__sse_hub_close(rm__sse_hub_t *hub);
/* After close() and after the HTTP daemon stopped. */
void rm__sse_hub_free(rm__sse_hub_t *hub);

/* Copies job, type and data (one JSON value; newlines are split into several
 * data: lines). Returns the event's id, 0 after close. */
uint64_t rm__sse_publish(rm__sse_hub_t *hub, const char *job, const char *type,
                         const char *data);

/* A new streaming response; job_filter NULL or "" for all. last_id 0 = live
 * only (no replay). NULL on allocation failure. */
struct MHD_Response *rm__sse_response(rm__sse_hub_t *hub, const char *job_filter,
                                      uint64_t last_id);

/* Open streams right now, and the last id published (for /metrics). */
int rm__sse_streams(rm__sse_hub_t *hub);
uint64_t rm__sse_last_id(rm__sse_hub_t *hub);

#endif
