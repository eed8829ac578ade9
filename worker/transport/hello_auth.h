/*
 * hello_auth.h - proof of job membership in the data-plane handshakes
 * (TCP: tcp/tcp_connect.c, RDMA bootstrap: rdma/rdma_connect.c). Design and
 * threat model: hello_auth.c and docs/data-plane-security.md.
 */
#ifndef RM_WORKER_HELLO_AUTH_H
#define RM_WORKER_HELLO_AUTH_H

#include <stdint.h>

#include "comm/comm_int.h"

#define RM__AUTH_NONCE 32 /* bytes of a fresh nonce, per side, per attempt */
#define RM__AUTH_MAC 32   /* HMAC-SHA-256 */

/* Who a MAC speaks for: the side that dialled, or the side that accepted.
 * Each side only ever checks the other side's role, so a MAC reflected
 * back to the side that made it is refused. */
typedef enum { RM__AUTH_DIALER = 'D', RM__AUTH_LISTENER = 'L' } rm__auth_role_t;

/* What one handshake binds: the communicator's (job, generation, world),
 * the ranks of both ends and both nonces. */
typedef struct rm__auth_ctx {
  int dialer, listener; /* ranks */
  unsigned char nonce_d[RM__AUTH_NONCE], nonce_l[RM__AUTH_NONCE];
} rm__auth_ctx_t;

/* A fresh random nonce (libsodium randombytes). */
void rm__auth_nonce(unsigned char out[RM__AUTH_NONCE]);
/* The MAC `role` sends, keyed by c->data_key (c must be keyed). */
void rm__auth_mac(const rm_comm_t *c, const rm__auth_ctx_t *x,
                  rm__auth_role_t role, unsigned char out[RM__AUTH_MAC]);
/* 1 when mac is the one `role` must send (constant time), else 0. */
int rm__auth_check(const rm_comm_t *c, const rm__auth_ctx_t *x,
                   rm__auth_role_t role, const unsigned char mac[RM__AUTH_MAC]);

#endif
