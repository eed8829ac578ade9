/*
 * checkpoint.c - checkpoint files: format, atomic write, validated read,
 * newest-valid lookup and keep-last-K cleanup.
 *
 * FILE FORMAT (version 1). A 64-byte header, then payload_len bytes of
 * payload (the workload's model state, opaque here). All integers are
 * little-endian whatever the host.
 *
 *   offset size description
 *   ------ ---- -------------------------------------------------------------
 *        0    8 magic "RMCKPT\n\x1a" (a text-mode or truncating copy shows)
 *        8    4 format version, 1
 *       12    4 header length in bytes, 64 (room to grow: readers of a later
 *               version may skip a longer header)
 *       16    8 job id
 *       24    8 step (the state after this step's update)
 *       32    8 generation that wrote the file
 *       40    4 writer rank (int32, >= 0)
 *       44    4 world size when written (int32, >= 1)
 *       48    8 payload length in bytes
 *       56    4 CRC-32 of the payload
 *       60    4 CRC-32 of header bytes 0..59
 *       64    - payload
 *
 * A file is VALID iff: size >= 64; magic, version 1 and header length 64;
 * header CRC matches; size == 64 + payload length (shorter = truncated,
 * longer = trailing bytes); payload CRC matches. Anything else is rejected
 * with a message naming the file and the first check that failed.
 *
 * ATOMIC WRITE. final = <dir>/ckpt-j<job>-r<rank>-s<step:020>.rmck,
 * temp = <dir>/.ckpt-...rmck.tmp (same directory, hence same file system,
 * so rename(2) is atomic):
 *   1. open temp (O_TRUNC), write header + payload, fsync(temp), close
 *   2. rename(temp, final)        the only step that makes the file visible
 *   3. fsync(dir)                 makes the rename itself durable
 * Crash analysis: before 2 the final name is untouched (older checkpoints,
 * which have other names, stay valid; the temp is garbage that prune removes
 * and readers never look at, since they only list ckpt-*.rmck names);
 * after 2 the final name refers to a complete, fsynced file; without 3 a
 * power loss may forget the rename, never tear the file. Readers still
 * validate everything, so a disk that lies about fsync yields a rejected
 * file and rm__ckpt_latest falls back to an older one.
 *
 * Directory listing, newest-valid lookup and keep-last-K live in
 * checkpoint_dir.c.
 */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "checkpoint/checkpoint_int.h"
#include "rm_le.h"
#include "rm_testhook.h"

#if RM_TESTHOOKS
rm__testhook_fn rm__ckpt_test_hook; /* rm_testhook.h; test builds only */
#endif

static const uint8_t ckpt_magic[8] = {'R', 'M', 'C', 'K', 'P', 'T', '\n', 0x1a};

/* ---- CRC-32 ---- */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

uint32_t rm__crc32(uint32_t crc, const void *data, size_t len)
{
  const uint8_t *p = data;
  pthread_once(&crc_once, crc_init);
  crc = ~crc;
  for (size_t i = 0; i < len; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

/* ---- helpers ---- */
void rm__ckpt_seterr(char *err, size_t n, const char *fmt, ...)
{
  if (err == NULL || n == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
}


static void pack_header(uint8_t *h, const rm__ckpt_meta_t *m, uint32_t pcrc)
{
  memcpy(h, ckpt_magic, 8);
  rm__put_le32(h + 8, RM__CKPT_VERSION);
  rm__put_le32(h + 12, RM__CKPT_HEADER_LEN);
  rm__put_le64(h + 16, m->job_id);
  rm__put_le64(h + 24, m->step);
  rm__put_le64(h + 32, m->generation);
  rm__put_le32(h + 40, (uint32_t)m->rank);
  rm__put_le32(h + 44, (uint32_t)m->world);
  rm__put_le64(h + 48, m->payload_len);
  rm__put_le32(h + 56, pcrc);
  rm__put_le32(h + 60, rm__crc32(0, h, 60));
}

static int write_all(int fd, const void *buf, size_t len)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* 1 = full read, 0 = EOF before len, -1 = error */
static int read_all(int fd, void *buf, size_t len)
{
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len > (1u << 30) ? (1u << 30) : len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    p += n;
    len -= (size_t)n;
  }
  return 1;
}

rm_status_t rm__ckpt_path(const char *dir, uint64_t job_id, int rank,
                          uint64_t step, char *buf, size_t len)
{
  if (dir == NULL || buf == NULL || rank < 0) return RM_ERR_INVALID_ARG;
  int n = snprintf(buf, len, "%s/ckpt-j%" PRIu64 "-r%d-s%020" PRIu64 ".rmck",
                   dir, job_id, rank, step);
  return (n < 0 || (size_t)n >= len) ? RM_ERR_INVALID_ARG : RM_OK;
}

int rm__ckpt_fsync_dir(const char *dir)
{
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* payload length and (crc not NULL) CRC over the iovs; -1 for a NULL base
 * with a length */
static int iov_sum(const struct iovec *iov, int iovcnt, uint64_t *len,
                   uint32_t *crc)
{
  *len = 0;
  if (crc != NULL) *crc = 0;
  for (int i = 0; i < iovcnt; i++) {
    if (iov[i].iov_len > 0 && iov[i].iov_base == NULL) return -1;
    *len += iov[i].iov_len;
    if (crc != NULL) *crc = rm__crc32(*crc, iov[i].iov_base, iov[i].iov_len);
  }
  return 0;
}

rm_status_t rm__ckpt_writev(const char *dir, const rm__ckpt_meta_t *meta,
                            const struct iovec *iov, int iovcnt, char *path,
                            size_t path_len, char *err, size_t errlen)
{
  char fin[4096], tmp[4096 + 16];
  uint8_t h[RM__CKPT_HEADER_LEN];
  rm__ckpt_meta_t m;
  uint32_t crc;
  rm_status_t st = RM_OK;
  int fd = -1;
  if (meta == NULL || meta->world < 1 || iovcnt < 0 || (iovcnt > 0 && iov == NULL) ||
      iov_sum(iov, iovcnt, &m.payload_len, &crc) != 0 ||
      rm__ckpt_path(dir, meta->job_id, meta->rank, meta->step, fin, sizeof fin) != RM_OK) {
    rm__ckpt_seterr(err, errlen, "checkpoint write: invalid arguments");
    return RM_ERR_INVALID_ARG;
  }
  m.job_id = meta->job_id;
  m.step = meta->step;
  m.generation = meta->generation;
  m.rank = meta->rank;
  m.world = meta->world;
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, strrchr(fin, '/') + 1);
  pack_header(h, &m, crc);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: open: %s", tmp, strerror(errno));
    return errno == ENOENT ? RM_ERR_NOT_FOUND : RM_ERR_SYSTEM;
  }
  int bad = write_all(fd, h, sizeof h);
  for (int i = 0; i < iovcnt && bad == 0; i++)
    bad = write_all(fd, iov[i].iov_base, iov[i].iov_len);
  if (bad != 0 || fsync(fd) != 0) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: write/fsync: %s", tmp, strerror(errno));
    st = RM_ERR_SYSTEM;
    goto fail;
  }
  if (close(fd) != 0) {
    fd = -1;
    rm__ckpt_seterr(err, errlen, "checkpoint %s: close: %s", tmp, strerror(errno));
    st = RM_ERR_SYSTEM;
    goto fail;
  }
  fd = -1;
  rm__testhook_ckpt("synced"); /* test builds: fault injection */
  if (rename(tmp, fin) != 0) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: rename: %s", fin, strerror(errno));
    st = RM_ERR_SYSTEM;
    goto fail;
  }
  if (rm__ckpt_fsync_dir(dir) != 0) {
    /* the file is complete and visible; only its durability is in doubt */
    rm__ckpt_seterr(err, errlen, "checkpoint %s: fsync of directory: %s", fin, strerror(errno));
    return RM_ERR_SYSTEM;
  }
  if (path != NULL) snprintf(path, path_len, "%s", fin);
  return RM_OK;
fail:
  if (fd >= 0) close(fd);
  unlink(tmp);
  return st;
}

rm_status_t rm__ckpt_write(const char *dir, const rm__ckpt_meta_t *meta,
                           const void *payload, char *path, size_t path_len,
                           char *err, size_t errlen)
{
  struct iovec one;
  if (meta == NULL) return RM_ERR_INVALID_ARG;
  one.iov_base = (void *)(uintptr_t)payload; /* only read */
  one.iov_len = (size_t)meta->payload_len;
  return rm__ckpt_writev(dir, meta, &one, 1, path, path_len, err, errlen);
}

static rm_status_t check_header(const char *path, const uint8_t *h,
                                uint64_t size, rm__ckpt_meta_t *m,
                                char *err, size_t errlen)
{
  if (memcmp(h, ckpt_magic, 8) != 0) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: bad magic (not a checkpoint file)", path);
    return RM_ERR_INVALID_ARG;
  }
  if (rm__get_le32(h + 8) != RM__CKPT_VERSION || rm__get_le32(h + 12) != RM__CKPT_HEADER_LEN) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: unsupported version %u (header %u bytes)",
           path, rm__get_le32(h + 8), rm__get_le32(h + 12));
    return RM_ERR_INVALID_ARG;
  }
  if (rm__get_le32(h + 60) != rm__crc32(0, h, 60)) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: header checksum mismatch (corrupt)", path);
    return RM_ERR_INVALID_ARG;
  }
  m->job_id = rm__get_le64(h + 16);
  m->step = rm__get_le64(h + 24);
  m->generation = rm__get_le64(h + 32);
  m->rank = (int)rm__get_le32(h + 40);
  m->world = (int)rm__get_le32(h + 44);
  m->payload_len = rm__get_le64(h + 48);
  if (size - RM__CKPT_HEADER_LEN != m->payload_len) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: %s: file has %" PRIu64 " payload bytes, "
           "header says %" PRIu64, path,
           size - RM__CKPT_HEADER_LEN < m->payload_len ? "truncated" : "trailing bytes",
           size - RM__CKPT_HEADER_LEN, m->payload_len);
    return RM_ERR_INVALID_ARG;
  }
  return RM_OK;
}

/* Open path, read and check its header. OUT *fd (open, positioned at the
 * payload), *m, h[]. On failure nothing stays open. */
static rm_status_t open_checked(const char *path, int *fd_out, rm__ckpt_meta_t *m,
                                uint8_t *h, char *err, size_t errlen)
{
  struct stat sb;
  rm_status_t st = RM_OK;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: open: %s", path, strerror(errno));
    return errno == ENOENT ? RM_ERR_NOT_FOUND : RM_ERR_SYSTEM;
  }
  if (fstat(fd, &sb) != 0) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: fstat: %s", path, strerror(errno));
    st = RM_ERR_SYSTEM;
  } else if ((uint64_t)sb.st_size < RM__CKPT_HEADER_LEN) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: truncated: %lld bytes, shorter than the "
           "%d-byte header", path, (long long)sb.st_size, RM__CKPT_HEADER_LEN);
    st = RM_ERR_INVALID_ARG;
  } else if (read_all(fd, h, RM__CKPT_HEADER_LEN) != 1) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: reading header failed", path);
    st = RM_ERR_SYSTEM;
  } else {
    st = check_header(path, h, (uint64_t)sb.st_size, m, err, errlen);
  }
  if (st != RM_OK) {
    close(fd);
    return st;
  }
  *fd_out = fd;
  return RM_OK;
}

/* read the payload into iov (exactly m->payload_len bytes) and check its CRC */
static rm_status_t read_payload(const char *path, int fd, const uint8_t *h,
                                const struct iovec *iov, int iovcnt,
                                char *err, size_t errlen)
{
  uint32_t crc = 0;
  for (int i = 0; i < iovcnt; i++) {
    if (iov[i].iov_len > 0 && read_all(fd, iov[i].iov_base, iov[i].iov_len) != 1) {
      rm__ckpt_seterr(err, errlen, "checkpoint %s: reading payload failed (changed while read?)", path);
      return RM_ERR_SYSTEM;
    }
    crc = rm__crc32(crc, iov[i].iov_base, iov[i].iov_len);
  }
  if (crc != rm__get_le32(h + 56)) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: payload checksum mismatch (corrupt)", path);
    return RM_ERR_INVALID_ARG;
  }
  return RM_OK;
}

rm_status_t rm__ckpt_read(const char *path, rm__ckpt_meta_t *meta,
                          void **payload, char *err, size_t errlen)
{
  uint8_t h[RM__CKPT_HEADER_LEN];
  rm__ckpt_meta_t m;
  struct iovec one = {NULL, 0};
  int fd = -1;
  if (path == NULL || meta == NULL || payload == NULL) return RM_ERR_INVALID_ARG;
  rm_status_t st = open_checked(path, &fd, &m, h, err, errlen);
  if (st != RM_OK) return st;
  if (m.payload_len > 0) {
    one.iov_len = (size_t)m.payload_len;
    one.iov_base = malloc(one.iov_len);
    if (one.iov_base == NULL) {
      rm__ckpt_seterr(err, errlen, "checkpoint %s: no memory for %" PRIu64 " bytes", path,
             m.payload_len);
      st = RM_ERR_NOMEM;
      goto out;
    }
  }
  st = read_payload(path, fd, h, &one, 1, err, errlen);
  if (st != RM_OK) goto out;
  *meta = m;
  *payload = one.iov_base;
  one.iov_base = NULL;
out:
  free(one.iov_base);
  close(fd);
  return st;
}

rm_status_t rm__ckpt_readv(const char *path, rm__ckpt_meta_t *meta,
                           const struct iovec *iov, int iovcnt, char *err,
                           size_t errlen)
{
  uint8_t h[RM__CKPT_HEADER_LEN];
  rm__ckpt_meta_t m;
  uint64_t cap;
  int fd = -1;
  if (path == NULL || meta == NULL || iovcnt < 0 || (iovcnt > 0 && iov == NULL) ||
      iov_sum(iov, iovcnt, &cap, NULL) != 0)
    return RM_ERR_INVALID_ARG;
  rm_status_t st = open_checked(path, &fd, &m, h, err, errlen);
  if (st != RM_OK) return st;
  if (m.payload_len != cap) {
    rm__ckpt_seterr(err, errlen, "checkpoint %s: payload is %" PRIu64 " bytes, the buffers "
           "hold %" PRIu64 " (different model?)", path, m.payload_len, cap);
    st = RM_ERR_INVALID_ARG;
  } else {
    st = read_payload(path, fd, h, iov, iovcnt, err, errlen);
  }
  close(fd);
  if (st == RM_OK) *meta = m;
  return st;
}
