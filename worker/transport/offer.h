/*
 * offer.h - this process's transport offer and priority list (offer.c).
 */
#ifndef RM_WORKER_TRANSPORT_OFFER_H
#define RM_WORKER_TRANSPORT_OFFER_H

#include <stddef.h>

#include "transport/transport.h"

#define RM__TP_NONCE_LEN 16

/* The transports of RINGMASTER_TRANSPORTS in order; returns how many. */
int rm__tp_priority(rm__tp_id_t out[RM__TP_COUNT]);
/* Host identity of shared memory (16 hex digits, or RINGMASTER_HOST_ID). */
const char *rm__tp_host_id(void);
/* The offer of a new endpoint bound to `host`: fills out (RM_TP_OFFER_MAX),
 * its nonce and the per-endpoint state of transports with an offer() op. */
void rm__tp_build_offer(char *out, size_t n, char nonce[RM__TP_NONCE_LEN + 1],
                        const char *host, void *state[RM__TP_COUNT]);
/* offer_close of every transport that kept endpoint state. */
void rm__tp_close_offer(void *state[RM__TP_COUNT]);
const rm__transport_ops_t *rm__tp_by_name(const char *name);
const rm__transport_ops_t *rm__tp_by_id(rm__tp_id_t id);

#endif
