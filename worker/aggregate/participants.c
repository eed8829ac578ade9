/*
 * participants.c - participant sets (member masks) and the all-reduce over a
 * participant set, built on the public collectives (rm_allreduce) and, for
 * device buffers, the device layer's buffer operations (device/dev.h).
 *
 * PARTICIPANT SETS. A member mask is `world` bytes, member[r] != 0 when rank
 * r contributes to the step. The coordinator fixes one mask per step
 * (backup: the first N arrivals; deadline: those in by the deadline; coded:
 * the decode plan) and every rank passes the same one to
 * rm__masked_allreduce. (A "mask" here is a set of ranks, not a secure
 * aggregation mask.)
 *
 * MASKED ALL-REDUCE. Ranks R = {0..world-1}, members M (fixed by the
 * coordinator for the step, identical on every rank), k = |M| >= 1.
 *
 *   z_r = send_r   if r in M           every rank r in R runs ONE
 *       = 0        otherwise           rm_allreduce(z_r, SUM)
 *   recv = sum_{r in R} z_r = sum_{r in M} send_r
 *   RM_AVG: recv /= k (rm__scale_avg: once, after the sum)
 *
 * Why every rank takes part instead of a sub-communicator of M: building a
 * communicator per step costs a connection round; zero contributions cost
 * only bandwidth the ring spends anyway, and late ranks also need the result
 * to stay bitwise identical with the others. 0x00 bytes are 0 in every
 * dtype, so a memset is the zero vector.
 *
 * DEVICE BUFFERS. The buffers are classified as the collectives do
 * (device/dev.h rm__mem_classify: all host, or all memory of the
 * communicator's device). On a device the zeroing and the scaling run on
 * the GPU, each bracketed as a collective is (rm__dev_begin: after what the
 * user's stream wrote; rm__dev_end: finished on return), and the
 * rm_allreduce between them is a device collective: nothing goes through
 * host memory.
 *
 * MEMBER VERIFICATION (RM__AGG_VERIFY_MEMBERS). h = FNV-1a-64 of the mask,
 * reduced to 62 bits; every rank all-reduces (h, -h) with MAX over i64 and
 * gets (max h, -min h). All masks equal <=> max == min; every rank sees the
 * same two numbers, so every rank takes the same branch and the
 * communicator's collective sequence stays in step even on a mismatch.
 *
 * The robust all-reduce (all-gather, then robust.c's combine) is in
 * robust_allreduce.c.
 */
#include "aggregate/aggregate.h"

#include <string.h>

#include "device/dev.h"
#include "rm_check.h"

/* ---- participant sets ---- */

rm_status_t rm__members_from_list(const int *ranks, int n, int world,
                                  uint8_t *member)
{
  if (world < 1 || n < 0 || member == NULL || (n > 0 && ranks == NULL))
    return RM_ERR_INVALID_ARG;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= world) return RM_ERR_INVALID_ARG;
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i]) return RM_ERR_INVALID_ARG;
  }
  memset(member, 0, (size_t)world);
  for (int i = 0; i < n; i++) member[ranks[i]] = 1;
  return RM_OK;
}

int rm__members_count(const uint8_t *member, int world)
{
  int k = 0;
  for (int r = 0; member != NULL && r < world; r++) k += member[r] != 0;
  return k;
}

/* ---- all-reduce over a participant set ---- */

static uint64_t mask_hash(const uint8_t *member, int world)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int r = 0; r < world; r++) {
    h ^= (uint64_t)(member[r] != 0);
    h *= 0x100000001b3ULL;
  }
  return h >> 2; /* so that -h fits in int64 */
}

static rm_status_t verify_members(rm_comm_t *comm, const uint8_t *member,
                                  int world)
{
  int64_t v[2];
  int64_t h = (int64_t)mask_hash(member, world);
  v[0] = h;
  v[1] = -h;
  rm_status_t st = rm_allreduce(comm, v, v, 2, RM_I64, RM_MAX);
  if (st != RM_OK) return st;
  return (v[0] == -v[1]) ? RM_OK : RM_ERR_PROTOCOL;
}

/* The local steps of a masked all-reduce on buf in the buffers' memory
 * kind: zero it (k == 0) or divide it by k (RM_AVG). */
static rm_status_t local_step(rm_comm_t *c, int device, int ordinal, void *buf, size_t count,
                              rm_dtype_t dt, int k)
{
  rm_status_t st;
  if (device) RM_CHECK(rm__dev_begin(c, ordinal));
  st = k == 0 ? rm__mzero(c, buf, count * rm_dtype_size(dt)) : rm__mscale(c, buf, count, dt, k);
  return device ? rm__dev_end(c, st) : st;
}

rm_status_t rm__masked_allreduce(rm_comm_t *comm, const void *send,
                                 void *recv, size_t count, rm_dtype_t dt,
                                 rm_op_t op, const uint8_t *member,
                                 unsigned flags, int *contributors)
{
  size_t esz = rm_dtype_size(dt);
  if (comm == NULL || member == NULL || esz == 0 ||
      (op != RM_SUM && op != RM_AVG) || (count > 0 && recv == NULL))
    return RM_ERR_INVALID_ARG;
  int world = rm_comm_world(comm), rank = rm_comm_rank(comm);
  int k = rm__members_count(member, world);
  if (k == 0 || (member[rank] && count > 0 && send == NULL))
    return RM_ERR_INVALID_ARG;
  const void *bufs[2] = {member[rank] ? send : NULL, recv};
  int device = 0, ordinal = 0;
  rm_status_t st = RM_OK;
  if (count > 0) RM_CHECK(rm__mem_classify(comm, bufs, 2, &device, &ordinal));
  if (flags & RM__AGG_VERIFY_MEMBERS) {
    st = verify_members(comm, member, world);
    if (st != RM_OK) return st;
  }
  if (member[rank]) {
    st = rm_allreduce(comm, send, recv, count, dt, RM_SUM);
  } else {
    if (count > 0) RM_CHECK(local_step(comm, device, ordinal, recv, count, dt, 0));
    st = rm_allreduce(comm, recv, recv, count, dt, RM_SUM);
  }
  if (st != RM_OK) return st;
  if (op == RM_AVG && count > 0) RM_CHECK(local_step(comm, device, ordinal, recv, count, dt, k));
  if (contributors != NULL) *contributors = k;
  return RM_OK;
}
