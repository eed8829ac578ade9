/*
 * hello_auth.c - the MAC that lets a data-plane handshake prove job
 * membership (used by tcp/tcp_connect.c and rdma/rdma_connect.c; the wire
 * formats are at the top of those files' *_int.h).
 *
 * THREAT. The data port is reachable by anyone on the network, and job id,
 * generation, world and rank are small integers anyone can guess. Without a
 * proof, a process that sends a well-formed HELLO before the real peer takes
 * that rank's place on the link and feeds data into the collective.
 *
 * KEY. K_gen (32 bytes) is derived by the coordinator per (job, generation)
 * from its own secret (coordinator/store/store_datakey.c) and handed to each
 * member in its Join answer (JoinResponse.data_key); rm_comm_config_t
 * .data_key carries it into the communicator. A worker of another job or of
 * an older generation does not hold it.
 *
 * EXCHANGE (challenge-response in both directions, one round trip more than
 * an unauthenticated HELLO):
 *
 *   dialer   -> listener  HELLO  + nonce_d
 *   listener -> dialer    HELLO' + nonce_l + MAC(K, 'L', ...)
 *   dialer   -> listener  proof  + MAC(K, 'D', ...)
 *
 *   MAC(K, role, ...) = HMAC-SHA-256(K, "ringmaster data-plane hello v1"
 *       || 0x00 || role (1 byte) || job (8) || generation (8) || world (8)
 *       || dialer rank (8) || listener rank (8) || nonce_d (32)
 *       || nonce_l (32)), integers little-endian.
 *
 * Properties: the dialer accepts the link only after checking the
 * listener's MAC over its own fresh nonce_d; the listener only after
 * checking the dialer's MAC over its own fresh nonce_l. A recorded handshake
 * replayed on a new connection meets a new nonce and fails. The role byte
 * keeps a listener's MAC (which anyone who dials can obtain, over a nonce of
 * its choice) from serving as a dialer's proof. Until its proof checks out,
 * a connection holds no rank: several candidates for one rank may wait at
 * once, and the first valid proof wins.
 */
#include <pthread.h>
#include <string.h>

#include <sodium.h>

#include "rm_le.h"
#include "rm_log.h"
#include "transport/hello_auth.h"

static const char LABEL[] = "ringmaster data-plane hello v1";

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static void sodium_start(void)
{
  /* sodium_init fails only when no entropy source is readable; then
   * randombytes_buf aborts rather than return predictable nonces */
  if (sodium_init() < 0) RM_ERROR("libsodium could not start: no entropy source");
}

void rm__auth_nonce(unsigned char out[RM__AUTH_NONCE])
{
  pthread_once(&sodium_once, sodium_start);
  randombytes_buf(out, RM__AUTH_NONCE);
}

void rm__auth_mac(const rm_comm_t *c, const rm__auth_ctx_t *x,
                  rm__auth_role_t role, unsigned char out[RM__AUTH_MAC])
{
  crypto_auth_hmacsha256_state st;
  unsigned char ints[1 + 5 * 8];
  pthread_once(&sodium_once, sodium_start);
  ints[0] = (unsigned char)role;
  rm__put_le64(ints + 1, c->job_id);
  rm__put_le64(ints + 9, c->generation);
  rm__put_le64(ints + 17, (uint64_t)c->world);
  rm__put_le64(ints + 25, (uint64_t)x->dialer);
  rm__put_le64(ints + 33, (uint64_t)x->listener);
  crypto_auth_hmacsha256_init(&st, c->data_key, sizeof c->data_key);
  crypto_auth_hmacsha256_update(&st, (const unsigned char *)LABEL, sizeof LABEL);
  crypto_auth_hmacsha256_update(&st, ints, sizeof ints);
  crypto_auth_hmacsha256_update(&st, x->nonce_d, sizeof x->nonce_d);
  crypto_auth_hmacsha256_update(&st, x->nonce_l, sizeof x->nonce_l);
  crypto_auth_hmacsha256_final(&st, out);
  sodium_memzero(&st, sizeof st);
}

int rm__auth_check(const rm_comm_t *c, const rm__auth_ctx_t *x,
                   rm__auth_role_t role, const unsigned char mac[RM__AUTH_MAC])
{
  unsigned char want[RM__AUTH_MAC];
  rm__auth_mac(c, x, role, want);
  int ok = sodium_memcmp(want, mac, RM__AUTH_MAC) == 0;
  sodium_memzero(want, sizeof want);
  return ok;
}
