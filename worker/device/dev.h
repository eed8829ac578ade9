/*
 * dev.h - collectives on device (GPU) memory: the per-communicator device
 * state, the memory-kind rule, and the buffer operations algorithms use.
 *
 * One collective, one memory kind. The public collectives look at their
 * buffers once (rm__mem_classify): all host memory, the usual path; all
 * device memory of one device, a device collective; a mix is refused with
 * RM_ERR_INVALID_ARG. A communicator serves one device (the first device
 * collective fixes it, as an NCCL communicator has one). Ranks need not
 * agree on the kind: the wire carries the same messages either way.
 *
 * A device collective, start to end:
 *
 *   rm__dev_begin   set the device; stream s waits for an event recorded
 *                   on the user's stream (rm_comm_set_stream; the default
 *                   stream when unset), so the collective reads what the
 *                   user's kernels wrote; c->dev_active = 1
 *   the algorithm   unchanged: its sends, receives and reductions go to
 *                   the device through the helpers below and through
 *                   staging (stage.c), all ordered on two streams:
 *                     s      host-to-device copies, reductions, device
 *                            copies (rm__mcopy), zeroing (rm__mzero),
 *                            scaling (rm__mscale)
 *                     s_out  device-to-host copies of outgoing data, each
 *                            after an event on s (what it copies is final)
 *   rm__dev_end     wait (with the communicator's deadline) until both
 *                   streams have run everything; c->dev_active = 0; on a
 *                   failure also quiesce staging (stage.c) before any
 *                   staging memory is reused or freed
 *
 * Why two streams and no other waits are enough: every device write the
 * algorithm causes (a receive's host-to-device copy, a reduction, a copy)
 * is on s, in the algorithm's program order; every device read for the
 * wire is on s_out after an event of s taken when the send was posted.
 * The algorithms already wait for a send before writing the range it
 * reads (ring's all-gather hazard, butterfly's wait_sends), and a staged
 * send completes only after its device-to-host copy and its wire transfer.
 *
 * Memory: rm__scratch (comm.c) hands out device scratch while dev_active;
 * rm__mtmp a second buffer (reduce-scatter's copy, a tree accumulator);
 * both kept for the communicator's life and grown on demand. Failures of
 * the runtime are sticky on the communicator (RM_ERR_SYSTEM, "device:
 * ..."): a GPU error is not something the next call recovers from.
 */
#ifndef RM_WORKER_DEVICE_DEV_H
#define RM_WORKER_DEVICE_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm_int.h"
#include "device/gpu.h"
#include "reduce/reduce.h"

/* Memory kind of a collective's buffers: NULL entries are ignored. OUT
 * *device = 1 and *ordinal when every non-NULL buffer is device memory of
 * one device, *device = 0 when every one is host memory. A mix, or a
 * device other than the communicator's, is RM_ERR_INVALID_ARG (logged
 * with the reason). Honours rm_comm_set_memory. */
rm_status_t rm__mem_classify(rm_comm_t *c, const void *const *bufs, int n,
                             int *device, int *ordinal);

rm_status_t rm__dev_begin(rm_comm_t *c, int ordinal);
/* Returns st, or the device failure that ending the collective met. */
rm_status_t rm__dev_end(rm_comm_t *c, rm_status_t st);
/* From rm_comm_destroy: quiesce and free everything device-side. */
void rm__dev_destroy(rm_comm_t *c);

/* Buffer operations that follow the collective's memory kind (host:
 * memmove, CPU kernels; device: enqueued on stream s). */
rm_status_t rm__mcopy(rm_comm_t *c, void *dst, const void *src, size_t n);
/* n zero bytes at dst (0x00 bytes are 0 in every dtype). */
rm_status_t rm__mzero(rm_comm_t *c, void *dst, size_t n);
rm_status_t rm__mscale(rm_comm_t *c, void *buf, size_t count, rm_dtype_t dt, int world);
rm_status_t rm__mreduce(rm_comm_t *c, const rm__reducer_t *r, void *dst, const void *src,
                        size_t count);
/* A temporary of n bytes: host malloc (free with rm__mtmp_free) or the
 * communicator's device temporary (kept; rm__mtmp_free does nothing). */
rm_status_t rm__mtmp(rm_comm_t *c, size_t n, void **out);
void rm__mtmp_free(rm_comm_t *c, void *p);
/* Device scratch of at least n bytes (rm__scratch while dev_active). */
rm_status_t rm__dev_scratch(rm_comm_t *c, size_t n, void **out);

/* ---- used by stage.c ---- */
typedef struct rm__bounce {
  void *p;            /* page-locked host memory */
  size_t cap;
  struct rm__bounce *next;
} rm__bounce_t;

struct rm__stage;

typedef struct rm__dev {
  const rm__gpu_ops_t *g;
  int ordinal;
  int prev_device;      /* the caller's, restored by rm__dev_end */
  void *s, *s_out;      /* top of file */
  void **ev_free;       /* idle events */
  int nev_free, ev_cap;
  void *scratch, *tmp;  /* device memory */
  size_t scratch_size, tmp_size;
  rm__bounce_t *bfree;  /* idle staging buffers, any size */
  rm__bounce_t *bfree_kept; /* destroy of a hung GPU: to rm__dev_keep */
  int hung;             /* a drain missed its deadline (rm__dev_drain) */
  /* staging (stage.c) */
  struct rm__stage *head, *tail; /* in post order */
  int d2h_pending;      /* sends whose device-to-host copy is running (or,
                         * by reference, whose data is not final yet) */
  int ref_pending;      /* receives by reference copying, not acknowledged */
  int ipc_refused;      /* sends whose memory could not be exported */
  uint64_t *send_seq;   /* per peer: staged sends posted by the algorithm */
  uint64_t *send_wired; /* per peer: of those, handed to the transport */
  uint64_t *recv_seq, *recv_wired; /* the same for direct receives */
  /* counters (tests, benchmarks): staged sends and receives; messages
   * sent and received by reference */
  uint64_t staged_bytes, staged_msgs, ref_bytes, ref_msgs, direct_bytes, direct_msgs;
} rm__dev_t;

/* Until both streams ran everything enqueued so far, at most ms (0 ms
 * once a drain missed its deadline: a hung GPU waits one deadline, not
 * one per caller). 1 done, 0 deadline, -1 runtime error; a runtime error
 * means the GPU stopped (its errors are sticky), so nothing runs after. */
int rm__dev_drain(rm_comm_t *c, int ms);
/* Words about the runtime's last failure, made sticky on c. */
rm_status_t rm__dev_fail(rm_comm_t *c, rm_status_t st, const char *what);
rm_status_t rm__dev_event(rm_comm_t *c, void **ev);
void rm__dev_event_put(rm_comm_t *c, void *ev);
rm_status_t rm__dev_bounce(rm_comm_t *c, size_t n, rm__bounce_t **out);
void rm__dev_bounce_put(rm_comm_t *c, rm__bounce_t *b);
/* Hold a list of staging buffers a hung GPU may still write, for the life
 * of the process (never freed, never reused). */
void rm__dev_keep(rm__bounce_t *list);

#endif
