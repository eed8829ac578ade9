/*
 * stage.h - messages from and into device memory over host transports
 * (stage.c has the design). Used by transport.c's request layer while a
 * device collective runs (c->dev_active) and by dev.c.
 */
#ifndef RM_WORKER_DEVICE_STAGE_H
#define RM_WORKER_DEVICE_STAGE_H

#include <stdint.h>

#include "comm/comm_int.h"

/* Take over a posted request whose buffer is device memory (post() filled
 * its generic fields). */
rm_status_t rm__stage_post(rm_comm_t *c, rm__req_t *req);
/* One pass over the staged requests: start what can start, complete what
 * finished. Never blocks. */
rm_status_t rm__stage_progress(rm_comm_t *c);
/* 1 while a staged send waits for device work (its device-to-host copy):
 * the wait loop must then poll instead of sleeping in a transport. */
int rm__stage_busy(const rm_comm_t *c);
/* 1 while any staged request is unfinished or holds staging memory. */
int rm__stage_active(const rm_comm_t *c);
/* 1 while a staged send's device-to-host copy is unfinished; OUT the
 * oldest such send (copies finish in order, so it is the one holding the
 * others): since when, its bytes and peer. */
int rm__stage_stuck(const rm_comm_t *c, int64_t *since_ns, size_t *bytes, int *peer);
/* The communicator failed (on its progress thread, while the requests'
 * owners still hold them): complete every staged request with the sticky
 * status and forget the owners. */
void rm__stage_detach(rm_comm_t *c);
/* End of a device collective that failed (or left work behind): make the
 * failure sticky if it is not, wait for the streams (rm__dev_drain: their
 * copies may use memory the transports map), close the transports (they
 * forget the messages they carried for staging), detach. Returns the
 * sticky status. */
rm_status_t rm__stage_quiesce(rm_comm_t *c, rm_status_t st);
/* After the streams drained: free every finished stage record. */
void rm__stage_reap(rm_comm_t *c);
/* The GPU never drained: drop the records, keep their memory (leaked). */
void rm__stage_leak(rm_comm_t *c);

#endif
