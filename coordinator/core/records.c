/*
 * records.c - what the RPC adapter reads and writes of the stored state,
 * through the core: the adapter (rpc/) never calls store/ itself, so the
 * layers stay model <- store <- core <- rpc <- wiring (coord.c), each
 * calling only the ones below it (tests/coordinator/test_layers.py reads the
 * objects' symbols). Every function runs under the coordinator lock, as its
 * caller's handler does.
 */
#include <string.h>

#include "core/core_int.h"
#include "rm_token.h"
#include "store/store.h"

int rm__job_token_ok(const rm_job_info_t *info, const char *token)
{
  char v[RM__VERIFIER_HEX + 1];
  rm__store_verifier(token ? token : "", v);
  int ok = info->token_verifier[0] != '\0' && rm__ct_streq(info->token_verifier, v);
  explicit_bzero(v, sizeof v);
  return ok;
}

rm_status_t rm__job_info_stored(rm_coord_t *c, uint64_t id, rm_job_info_t *out)
{
  return rm__store_job_get(c->store, id, out);
}

void rm__job_data_key(rm_coord_t *c, const rm__job_t *j, unsigned char key[RM__DATA_KEY_BYTES])
{
  rm__store_data_key(c->store, j->info.id, j->info.generation, key);
}

void rm__worker_record(rm_coord_t *c, rm__job_t *j, rm__worker_t *w, int fresh)
{
  if (fresh) rm__store_worker_insert(c->store, j, w);
  else rm__store_worker_update(c->store, j, w);
}

int rm__job_generation_rank(rm_coord_t *c, const rm__job_t *j, uint64_t gen, uint64_t worker_id)
{
  return rm__store_generation_rank(c->store, j->info.id, gen, worker_id);
}

rm_status_t rm__job_events_after(rm_coord_t *c, uint64_t job_id, uint64_t after, uint32_t limit,
                                 rm_event_t **out, size_t *n)
{
  return rm__store_events(c->store, job_id, after, limit, out, n);
}
