/*
 * fuzz_rpc.h - what fuzz_rpc.c and fuzz_rpc_server.c share: the call
 * object (server.c's struct rm__call is private to it; this one replaces
 * it in the fuzz build) and the delivery hook of the fake server.
 */
#ifndef RM_FUZZ_RPC_H
#define RM_FUZZ_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "rpc/rpc_int.h"

struct rm__call {
  rm__park_t park;      /* what rm__call_park returns */
  rm__park_t wpark;     /* rm__call_wpark: a Session's barrier or step-gate wait */
  int method;           /* RM__M_* */
  int answered;         /* final status queued (server.c's meaning) */
  int queued;           /* answers in c->rpc->out not yet delivered */
  int tail_used;        /* answered by rm__reply_tail / rm__reply_tail_gz */
  int gzip_ok;          /* rm__call_accept_gzip */
  /* delivered (rm__out_flush): */
  int finals;           /* final statuses delivered (must end as 1) */
  int code;             /* the final status */
  char details[320];
  uint8_t *msg;         /* the final message's bytes (heap), or NULL */
  size_t len;
  int streamed;         /* Watch / Session messages delivered */
  int stream_bad;       /* a Watch message that did not parse as Event */
};

/* fuzz_rpc.c: one queued answer reaches its call (code -1: a stream
 * message). buf is borrowed. */
void fz_deliver(rm__call_t *k, int code, const char *details,
                const uint8_t *buf, size_t len);

#endif
