/*
 * control.h - the session's gRPC client for the coordinator's Worker service.
 *
 * Unary calls over the gRPC C core with a deadline each; thread-safe (every
 * call has its own pluck completion queue), so the heartbeat thread and the
 * main thread share one channel.
 */
#ifndef RM_SESSION_CONTROL_H
#define RM_SESSION_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/v1/messages.pb-c.h"

typedef struct rm__ctl rm__ctl_t;

/* Plaintext unless ca/cert/key are all given (mutual TLS). NULL on failure. */
rm__ctl_t *rm__ctl_open(const char *addr, const char *ca, const char *cert,
                        const char *key, char *err, size_t errlen);
void rm__ctl_close(rm__ctl_t *c);

/* Call `method` ("/ringmaster.v1.Worker/Join") with req; on status OK *resp
 * is the unpacked answer (free with protobuf_c_message_free_unpacked).
 * Returns the gRPC status code (0 OK, 14 UNAVAILABLE, 4 DEADLINE_EXCEEDED,
 * ...); msg gets the status details. */
int rm__ctl_call(rm__ctl_t *c, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *resp_desc,
                 ProtobufCMessage **resp, int timeout_ms, char *msg,
                 size_t msglen);

/* A call kept open as the worker's session, without a deadline: the
 * coordinator sees it cancelled by the transport when this process dies
 * (recovery.c, detection source 2). Two kinds share the type:
 *
 *  - rm__ctl_stream_open: a server-streaming call (the agent's Watch with
 *    its worker id, the fallback for a coordinator without Session). The
 *    messages the server might send are not read; ask for none (after_seq
 *    far in the future). Its owner blocks in rm__ctl_stream_wait.
 *  - rm__ctl_session_open: a bidi call (Session) that carries messages both
 *    ways. Any thread may rm__ctl_stream_send (skipped while another is in
 *    flight) or rm__ctl_stream_send_queued (waits its turn in a one-message
 *    pending slot); its owner loops on rm__ctl_stream_next, which is also
 *    what completes the sends and starts the pending one.
 *
 * Lifecycle: open -> (wait | next...) until the call ended -> free, on the
 * owner's thread; cancel from any thread, any time before free. The owner
 * must make sure no send starts once free has begun (the session clears
 * its pointer under its lock first). */
typedef struct rm__ctl_stream rm__ctl_stream_t;
/* Start the server-streaming call; NULL when it could not be started. */
rm__ctl_stream_t *rm__ctl_stream_open(rm__ctl_t *c, const char *method,
                                      const ProtobufCMessage *req);
/* Start the bidi call with `first` as its first message (in flight as a
 * send until rm__ctl_stream_next sees it leave); NULL when it could not
 * be started. */
rm__ctl_stream_t *rm__ctl_session_open(rm__ctl_t *c, const char *method,
                                       const ProtobufCMessage *first);
/* Bidi, any thread: send msg (packed now; the caller keeps msg). At most
 * one message is in flight per call (gRPC's rule), and one more may wait
 * in the call's pending slot (control.c PENDING SLOT):
 *  - rm__ctl_stream_send (a heartbeat: skipped when busy): 1 sent (in
 *    flight), 0 busy with another (in flight or pending), *busy_ms (may be
 *    NULL) then says for how long the one in flight has been, -1 the call
 *    ended or the send could not start;
 *  - rm__ctl_stream_send_queued (a message that must go): 1 sent, 2 queued
 *    in the pending slot (the owner starts it, in rm__ctl_stream_next, when
 *    the one in flight completes; dropped if the call ends first), 0 the
 *    slot is taken already, -1 as above. */
int rm__ctl_stream_send(rm__ctl_stream_t *s, const ProtobufCMessage *msg,
                        int64_t *busy_ms);
int rm__ctl_stream_send_queued(rm__ctl_stream_t *s, const ProtobufCMessage *msg);
/* Bidi, owner only, after next returned 0: 1 when the pending slot still
 * holds a message that never started (the call ended first). */
int rm__ctl_stream_unsent(rm__ctl_stream_t *s);
/* Bidi, owner only: block until the next message (1: *msg is it, free with
 * protobuf_c_message_free_unpacked) or the end of the call (0: *status is
 * its gRPC status, detail its words). A message that does not unpack as
 * resp_desc is dropped with a warning. No deadline: the call ends only when the server
 * ends it, the connection breaks or rm__ctl_stream_cancel. After 0, do not
 * call it again. */
int rm__ctl_stream_next(rm__ctl_stream_t *s, const ProtobufCMessageDescriptor *resp_desc,
                        ProtobufCMessage **msg, int *status, char *detail,
                        size_t detaillen);
/* Server-streaming, owner only: block until the call ends (server closed
 * it, the connection broke, or rm__ctl_stream_cancel); returns its gRPC
 * status. */
int rm__ctl_stream_wait(rm__ctl_stream_t *s, char *msg, size_t msglen);
/* Any thread, any time before free: end the call (CANCELLED). The
 * coordinator cannot tell this from the process dying: cancelling a live
 * worker's session makes it lost. */
void rm__ctl_stream_cancel(rm__ctl_stream_t *s);
/* Owner, after wait returned or next returned 0 (or any time: it cancels
 * the call first); waits for every outstanding batch, then frees. */
void rm__ctl_stream_free(rm__ctl_stream_t *s);

#endif
