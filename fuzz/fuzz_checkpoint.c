/*
 * fuzz_checkpoint.c - libFuzzer target for the checkpoint file reader
 * (worker/checkpoint/checkpoint.c): the input is a whole checkpoint file.
 *
 * The reader takes a path, so the bytes go into one memfd per process
 * (opened again through /proc/self/fd/N: no disk I/O per input); where
 * memfd_create is missing they go into a file of a per-process temp dir
 * that is removed at exit. Each input is read with rm__ckpt_read and with
 * rm__ckpt_readv (buffers split in two where the header says the payload
 * length; a wrong total must be refused).
 *
 * Invariants (abort() on violation):
 *   1. every status is RM_OK or RM_ERR_INVALID_ARG (a corrupt file); never
 *      a crash; on failure the OUT arguments are untouched and err is a
 *      NUL-terminated message naming the file.
 *   2. a loaded file passes its own checks again here: re-packing the
 *      returned meta with the CRC-32 of the returned payload gives back
 *      exactly the input bytes (64-byte header + payload), so header CRC,
 *      payload CRC and length all held.
 *   3. rm__ckpt_read and rm__ckpt_readv agree (status, meta and payload).
 * FUZZ_CKPT_STRICT_META=1 also requires rank >= 0 and world >= 1 of a
 * loaded file, as the format table says; the reader does not check them.
 */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"

#ifndef FUZZ_CKPT_STRICT_META
#define FUZZ_CKPT_STRICT_META 0
#endif

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz_checkpoint: invariant failed: %s (line %d)\n",    \
              #cond, __LINE__);                                              \
      abort();                                                               \
    }                                                                        \
  } while (0)

static int mem_fd = -1;     /* the memfd, or -1 when files are used */
static char path[256];      /* what the reader opens */
static char tmp_dir[128];   /* per-process dir (file fallback), "" if none */

static void cleanup(void)
{
  if (tmp_dir[0] != '\0') {
    unlink(path);
    rmdir(tmp_dir);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  mem_fd = memfd_create("rm-fuzz-ckpt", MFD_CLOEXEC);
  if (mem_fd >= 0) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", mem_fd);
    if (access(path, R_OK) == 0) return 0;
    close(mem_fd);
    mem_fd = -1;
  }
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/rm-fuzz-ckpt-XXXXXX", base && *base ? base : "/tmp");
  if (mkdtemp(tmp_dir) == NULL) {
    perror("fuzz_checkpoint: mkdtemp");
    exit(1);
  }
  snprintf(path, sizeof path, "%s/ckpt-j1-r0-s00000000000000000001.rmck", tmp_dir);
  atexit(cleanup);
  return 0;
}

static void store(const uint8_t *data, size_t size)
{
  int fd = mem_fd;
  if (fd >= 0) {
    CHECK(ftruncate(fd, 0) == 0);
  } else {
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
  }
  for (size_t off = 0; off < size;) {
    ssize_t n = pwrite(fd, data + off, size - off, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    CHECK(n > 0);
    off += (size_t)n;
  }
  if (fd != mem_fd) close(fd);
}

static void put32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Invariant 2: the header as the format table in checkpoint.c defines it. */
static void check_loaded(const uint8_t *data, size_t size, const rm__ckpt_meta_t *m,
                         const void *payload)
{
  uint8_t h[RM__CKPT_HEADER_LEN];
  static const uint8_t magic[8] = {'R', 'M', 'C', 'K', 'P', 'T', '\n', 0x1a};
  CHECK(size == RM__CKPT_HEADER_LEN + m->payload_len);
  CHECK((m->payload_len == 0) == (payload == NULL));
  memcpy(h, magic, 8);
  put32(h + 8, RM__CKPT_VERSION);
  put32(h + 12, RM__CKPT_HEADER_LEN);
  put64(h + 16, m->job_id);
  put64(h + 24, m->step);
  put64(h + 32, m->generation);
  put32(h + 40, (uint32_t)m->rank);
  put32(h + 44, (uint32_t)m->world);
  put64(h + 48, m->payload_len);
  put32(h + 56, rm__crc32(0, payload, (size_t)m->payload_len));
  put32(h + 60, rm__crc32(0, h, 60));
  CHECK(memcmp(h, data, sizeof h) == 0);
  if (m->payload_len) CHECK(memcmp(payload, data + sizeof h, (size_t)m->payload_len) == 0);
  if (FUZZ_CKPT_STRICT_META) CHECK(m->rank >= 0 && m->world >= 1);
}

static void check_err(rm_status_t st, const char *err, size_t errlen)
{
  CHECK(st == RM_ERR_INVALID_ARG);
  CHECK(memchr(err, '\0', errlen) != NULL && err[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  rm__ckpt_meta_t m, mv;
  void *payload = (void *)&m; /* must stay untouched on failure */
  char err[512];
  rm_status_t st, stv;

  store(data, size);
  memset(&m, 0xa5, sizeof m);
  err[0] = '\0';
  st = rm__ckpt_read(path, &m, &payload, err, sizeof err);
  if (st == RM_OK) {
    check_loaded(data, size, &m, payload);
  } else {
    check_err(st, err, sizeof err);
    CHECK(payload == (void *)&m);
    payload = NULL;
  }

  /* readv with the payload length the header claims (bytes 48..55), split
   * in two at an input-chosen point; a claim the file cannot back is only
   * given buffers when it is small */
  uint64_t claim = 0;
  if (size >= RM__CKPT_HEADER_LEN)
    for (int i = 7; i >= 0; i--) claim = claim << 8 | data[48 + i];
  if (claim > size) claim = size > RM__CKPT_HEADER_LEN ? size - RM__CKPT_HEADER_LEN : 0;
  size_t cut = size ? data[size - 1] % ((size_t)claim + 1) : 0;
  uint8_t *a = malloc(cut), *b = malloc((size_t)claim - cut); /* exact: ASan */
  struct iovec iov[2] = {{a, cut}, {b, (size_t)claim - cut}};
  CHECK(a != NULL && b != NULL);
  memset(&mv, 0x5a, sizeof mv);
  err[0] = '\0';
  stv = rm__ckpt_readv(path, &mv, iov, 2, err, sizeof err);
  if (stv == RM_OK) {
    CHECK(st == RM_OK && memcmp(&mv, &m, sizeof m) == 0);
    CHECK(cut == 0 || memcmp(a, payload, cut) == 0);
    CHECK(claim == cut || memcmp(b, (uint8_t *)payload + cut, (size_t)claim - cut) == 0);
  } else {
    check_err(stv, err, sizeof err);
    /* only a buffer size that differs from a valid file's payload may turn
     * a good file down */
    CHECK(st != RM_OK || m.payload_len != claim);
    uint8_t poison[sizeof mv];
    memset(poison, 0x5a, sizeof poison);
    CHECK(memcmp(&mv, poison, sizeof mv) == 0);
  }
  /* a buffer one byte short of a valid file's payload is refused */
  if (st == RM_OK && m.payload_len > 0) {
    uint8_t *c = malloc((size_t)m.payload_len - 1);
    struct iovec one = {c, (size_t)m.payload_len - 1};
    CHECK(c != NULL || m.payload_len == 1);
    CHECK(rm__ckpt_readv(path, &mv, &one, 1, err, sizeof err) == RM_ERR_INVALID_ARG);
    free(c);
  }
  free(a);
  free(b);
  free(payload);
  return 0;
}
