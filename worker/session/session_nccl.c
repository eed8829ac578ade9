/*
 * session_nccl.c - a job whose algorithm is nccl: the NCCL unique id of each
 * generation travels through the coordinator (gRPC), not the data plane.
 *
 * Right after a generation forms, every member makes one exchange
 * (session_step.c rm__session_exchange, a barrier with payloads) named
 * "nccl-id-g<generation>": rank 0's payload is [1, id] with the id from
 * ncclGetUniqueId (device/nccl.c), everyone else's [0, zeros]. Released,
 * every member hands rank 0's id to its communicator (rm__nccl_set_id);
 * NCCL itself starts at the first collective on device buffers, on the
 * device of those buffers (device/nccl.c: the agreement over the data
 * plane that every rank has the library and the id, then init). The
 * coordinator holds payloads in memory only, for the life of the barrier.
 *
 * Nothing here is fatal: rank 0 without NCCL sends [0, ...] and a failed
 * exchange is logged; either way the first NCCL collective bootstraps over
 * the data plane or runs without NCCL, as on a plain communicator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/nccl.h"
#include "rm_log.h"
#include "session/session_int.h"

void rm__session_nccl_id(rm_session_t *s, rm_comm_t *comm)
{
  unsigned char mine[1 + RM__NCCL_ID_BYTES] = {0};
  unsigned char *all;
  char name[64], why[256] = "", err[256] = "";
  int world = rm_comm_world(comm);
  if (rm_comm_rank(comm) == 0 &&
      rm__nccl_unique_id((rm__nccl_id_t *)(mine + 1), why, sizeof why) == RM_OK)
    mine[0] = 1;
  else if (rm_comm_rank(comm) == 0)
    RM_WARN("generation %llu: no NCCL id (%s): the job's collectives on device buffers "
            "use ringmaster's own algorithms", (unsigned long long)rm_comm_generation(comm), why);
  all = calloc((size_t)world, sizeof mine);
  if (all == NULL) return;
  snprintf(name, sizeof name, "nccl-id-g%llu", (unsigned long long)rm_comm_generation(comm));
  rm_status_t st = rm__session_exchange(s, name, mine, sizeof mine, all, 0, err, sizeof err);
  if (st != RM_OK)
    RM_WARN("generation %llu: the NCCL id exchange through the coordinator failed (%s): "
            "NCCL bootstraps over the data plane instead",
            (unsigned long long)rm_comm_generation(comm), err);
  else if (all[0] == 1) {
    rm__nccl_set_id(comm, (const rm__nccl_id_t *)(all + 1));
    RM_INFO("generation %llu: rank %d: NCCL unique id from rank 0 through the coordinator",
            (unsigned long long)rm_comm_generation(comm), rm_comm_rank(comm));
  }
  free(all);
}
