/*
 * store_datakey.c - the data-plane key of one (job, generation), derived
 * from the coordinator's secret K (the key file <db>.key, store_key.c).
 *
 *   data_key(job, gen) = HMAC-SHA-256(K, "ringmaster data-plane key v1"
 *                        || 0x00 || job (8 bytes LE) || gen (8 bytes LE))
 *
 * Handed to every member of that generation in its Join answer
 * (JoinResponse.data_key, rpc/rpc.c); the members' TCP and RDMA handshakes
 * prove they hold it (worker/transport/hello_auth.c).
 *
 * Why derived, not stored: nothing new goes into the SQLite file, a
 * coordinator that restarts with the same <db>.key answers the same key to a
 * re-joining member of the same generation, and the key of one generation
 * tells nothing about another's (a member that was dropped from the group
 * cannot prove membership in the next). The label keeps it apart from the
 * token seal's pads, which use the same K.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "store/store_int.h"
#include "rm_le.h"
#include "rm_log.h"

static const char LABEL[] = "ringmaster data-plane key v1";

void rm__store_data_key(const rm__store_t *c, uint64_t job, uint64_t gen,
                        unsigned char out[RM__DATA_KEY_BYTES])
{
  unsigned char msg[sizeof LABEL + 16];
  unsigned int n = 0;
  memcpy(msg, LABEL, sizeof LABEL); /* with its NUL: the 0x00 separator */
  rm__put_le64(msg + sizeof LABEL, job);
  rm__put_le64(msg + sizeof LABEL + 8, gen);
  if (!HMAC(EVP_sha256(), c->key, (int)sizeof c->key, msg, sizeof msg, out, &n) ||
      n != RM__DATA_KEY_BYTES) {
    RM_ERROR("HMAC-SHA-256 failed in libcrypto");
    abort(); /* no key is safe to make up */
  }
}
