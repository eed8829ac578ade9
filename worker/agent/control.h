/*
 * control.h - the agent's gRPC client for the coordinator's Worker service.
 *
 * Unary calls over the gRPC C core with a deadline each; thread-safe (every
 * call has its own pluck completion queue), so the heartbeat thread and the
 * main thread share one channel.
 */
#ifndef RM_AGENT_CONTROL_H
#define RM_AGENT_CONTROL_H

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

#endif
