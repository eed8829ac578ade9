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

/* A server-streaming call kept open as a session (the agent's Watch with
 * its worker id): the coordinator sees it cancelled by the transport when
 * this process dies (recovery.c, detection source 2). Messages the server
 * might send are not read; ask for none (after_seq far in the future). */
typedef struct rm__ctl_stream rm__ctl_stream_t;
/* Start the call; NULL when it could not be started. */
rm__ctl_stream_t *rm__ctl_stream_open(rm__ctl_t *c, const char *method,
                                      const ProtobufCMessage *req);
/* Block until the call ends (server closed it, the connection broke, or
 * rm__ctl_stream_cancel); returns its gRPC status. */
int rm__ctl_stream_wait(rm__ctl_stream_t *s, char *msg, size_t msglen);
/* Any thread, any time before free: end the call (CANCELLED). */
void rm__ctl_stream_cancel(rm__ctl_stream_t *s);
/* After rm__ctl_stream_wait returned. */
void rm__ctl_stream_free(rm__ctl_stream_t *s);

#endif
