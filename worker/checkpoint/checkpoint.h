/*
 * checkpoint.h - atomic, checksummed checkpoint files of model state
 * (module tier; file format and crash-safety argument in checkpoint.c).
 *
 *   rm__ckpt_meta_t m = { .job_id = J, .step = S, .generation = G,
 *                         .rank = r, .world = n, .payload_len = bytes };
 *   rm__ckpt_write(dir, &m, params, path, sizeof path, err, sizeof err);
 *   rm__ckpt_prune(dir, J, r, 3, err, sizeof err);        keep the last 3
 *   ...after a restart...
 *   rm__ckpt_latest(dir, J, r, path, sizeof path, &m, err, sizeof err);
 *   rm__ckpt_read(path, &m, &payload, err, sizeof err);   free(payload)
 * or, for state kept in several arrays (parameters + optimizer state):
 *   rm__ckpt_writev(dir, &m, iov, 2, ...);  rm__ckpt_readv(path, &m, iov, 2, ...)
 *
 * One writer per (dir, job, rank) at a time (ranks may share a dir). Errors:
 * RM_ERR_INVALID_ARG for bad arguments AND for a file that is not a valid
 * checkpoint (bad magic/version, header or payload checksum mismatch,
 * truncated or trailing bytes); RM_ERR_NOT_FOUND for a missing file or no
 * checkpoint; RM_ERR_SYSTEM for an I/O error; RM_ERR_NOMEM. err (may be NULL)
 * always says which file and what was wrong.
 */
#ifndef RM_WORKER_CHECKPOINT_CHECKPOINT_H
#define RM_WORKER_CHECKPOINT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ringmaster/ringmaster.h"

#define RM__CKPT_VERSION 1
#define RM__CKPT_HEADER_LEN 64

typedef struct rm__ckpt_meta {
  uint64_t job_id;
  uint64_t step;       /* the step whose update is included */
  uint64_t generation; /* generation that wrote it */
  int rank;            /* writer's rank, >= 0 */
  int world;           /* world size when written, >= 1 */
  uint64_t payload_len;
} rm__ckpt_meta_t;

/* "<dir>/ckpt-j<job>-r<rank>-s<step, 20 digits>.rmck". RM_ERR_INVALID_ARG if
 * it does not fit in len. */
rm_status_t rm__ckpt_path(const char *dir, uint64_t job_id, int rank,
                          uint64_t step, char *buf, size_t len);

/* Write payload (meta->payload_len bytes) atomically as the checkpoint of
 * (job, rank, step) in dir: temp file in dir, write, fsync, rename over the
 * final name, fsync dir. After a crash at any point, the final name holds
 * either nothing, or the previous complete file, or the new complete file.
 * OUT path (may be NULL): the final file name. */
rm_status_t rm__ckpt_write(const char *dir, const rm__ckpt_meta_t *meta,
                           const void *payload, char *path, size_t path_len,
                           char *err, size_t errlen);

/* The same with the payload gathered from iovcnt buffers (for example
 * parameters, then the optimizer's momentum); meta->payload_len is ignored
 * and the header gets the sum of the lengths. */
rm_status_t rm__ckpt_writev(const char *dir, const rm__ckpt_meta_t *meta,
                            const struct iovec *iov, int iovcnt, char *path,
                            size_t path_len, char *err, size_t errlen);

/* Read and validate one file. OUT *meta and *payload (malloc'd, caller
 * frees; NULL when payload_len is 0) only on success. */
rm_status_t rm__ckpt_read(const char *path, rm__ckpt_meta_t *meta,
                          void **payload, char *err, size_t errlen);

/* Read and validate one file into caller buffers whose lengths must add up
 * to the payload length exactly (else RM_ERR_INVALID_ARG saying both sizes).
 * OUT *meta only on success; on failure the buffers' contents are
 * unspecified (restore nothing from them). */
rm_status_t rm__ckpt_readv(const char *path, rm__ckpt_meta_t *meta,
                           const struct iovec *iov, int iovcnt, char *err,
                           size_t errlen);

/* The newest checkpoint of (job, rank) in dir that validates completely;
 * invalid newer files are skipped with a warning (a torn or corrupt file
 * never hides an older good one). OUT path and *meta (may be NULL).
 * RM_ERR_NOT_FOUND when there is none. */
rm_status_t rm__ckpt_latest(const char *dir, uint64_t job_id, int rank,
                            char *path, size_t path_len, rm__ckpt_meta_t *meta,
                            char *err, size_t errlen);

/* Keep the `keep` (>= 1) newest checkpoints of (job, rank) in dir; delete
 * older ones and leftover temp files of (job, rank) from crashed writers.
 * Call it after a successful rm__ckpt_write. OUT *removed (may be NULL). */
rm_status_t rm__ckpt_prune(const char *dir, uint64_t job_id, int rank,
                           int keep, int *removed, char *err, size_t errlen);

/* CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320) continued from crc
 * (start with 0). crc32("123456789") == 0xCBF43926. */
uint32_t rm__crc32(uint32_t crc, const void *data, size_t len);

/* Fault injection (test builds only, common/rm_testhook.h): the writer
 * calls rm__testhook_ckpt("synced") after the temp file is written and
 * fsynced and before the rename; a test sets a hook with
 * rm__testhook_set_ckpt() in a forked child to _exit() there. */

#endif
