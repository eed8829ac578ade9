/*
 * rm_transports.h - what a worker's data plane offers and which transport a
 * pair of workers uses: one rule, shared by the worker (which connects by
 * it) and the coordinator (which shows it on the dashboard).
 *
 * An offer is a space-separated list of tokens in the worker's priority
 * order (RINGMASTER_TRANSPORTS, default "shm,rdma,tcp"), at most
 * RM_TP_OFFER_MAX bytes:
 *
 *   shm:<host>/<nonce>   shared memory; <host> names the host as far as
 *                        shared memory reaches (boot, network, pid and
 *                        /dev/shm identity: worker/transport/offer.c),
 *                        <nonce> this endpoint's segments (16 hex digits)
 *   rdma:<fabric>/<boot> RDMA (libibverbs, worker/transport/rdma/): ranks
 *                        whose ports share <fabric> (the transport's own
 *                        identity of one network, e.g. a GID subnet prefix)
 *                        reach each other; <boot> is what the transport
 *                        needs to bootstrap a pair (its own listener)
 *   tcp                  TCP to the peer's data_addr (host:port)
 *   cuda:<host>/<rest>   a capability, not a transport: this rank can move
 *                        device memory by CUDA IPC with ranks of the same
 *                        <host> (the shm token's); <rest> is "ipc1", the
 *                        protocol (worker/transport/shm/shm_int.h)
 *
 * Tokens are [a-z0-9:/._-]; an unknown transport's token is skipped, so a
 * newer worker's offer is read by an older one. An empty or absent offer
 * (a worker from before offers existed) means "tcp".
 *
 * The pair rule: walk the offer of the LOWER rank of the pair in order and
 * take the first token the other rank offers too (shm: the same <host>;
 * rdma: the same <fabric>; tcp: both list it). Both ranks and the coordinator compute it from the
 * same two strings, so they agree without a round trip. No common token:
 * the pair has no transport (rm_comm_init fails naming the peer).
 */
#ifndef RM_COMMON_TRANSPORTS_H
#define RM_COMMON_TRANSPORTS_H

#include <stddef.h>

#define RM_TP_OFFER_MAX 256

/* Whether `offer` is well formed; 0 = no, with the reason in why. At most
 * RM_TP_OFFER_MAX - 1 bytes of the charset above; tokens separated by
 * single spaces (no empty token); shm and rdma tokens have a non-empty
 * <host> / <fabric> of [a-z0-9._-] and a non-empty part after the '/';
 * an unknown kind's token only may not start with ':' or '/'. "" is valid
 * ("tcp"). Used on what the coordinator receives and on the offers given
 * to rm_comm_init. */
int rm_tp_offer_valid(const char *offer, char *why, size_t why_len);

/* The transport name ("shm", "tcp") the pair uses, NULL when none. lo and
 * hi are the offers of the lower and the higher rank (NULL or "" = "tcp"). */
const char *rm_tp_pick(const char *lo, const char *hi);

/* 1 when the pair of these two offers moves device memory by CUDA IPC:
 * the pair rule gives shared memory and both offer cuda:<host>/... with
 * the shared-memory <host>. */
int rm_tp_cuda_ipc(const char *lo, const char *hi);

/* The shm token of offer: copies <host> and <nonce>; 0 when absent. */
int rm_tp_offer_shm(const char *offer, char *host, size_t host_len,
                    char *nonce, size_t nonce_len);

#endif
