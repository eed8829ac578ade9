/*
 * checkpoint.c - the trainer's state on disk, written atomically.
 *
 * File format (host byte order; every platform ringmaster targets is
 * little-endian, and a foreign file fails the magic or checksum test):
 *
 *   offset  size        description
 *   0       8           magic "RMTRAIN1"
 *   8       4           format version, 1
 *   12      4           header size in bytes, 64
 *   16      8           step: updates applied (rm__trainer_t.step)
 *   24      8           nparams
 *   32      4           model input size      (must match the loader)
 *   36      4           hidden units          (must match option hidden)
 *   40      4           output classes
 *   44      4           activation (0 relu, 1 tanh)
 *   48      8           seed (data order; must match option seed)
 *   56      8           FNV-1a 64 of the payload
 *   64      4*nparams   parameters, f32
 *   64+4n   4*nparams   momentum buffer, f32
 *
 * Atomicity: write PATH.tmp.PID, fsync it, rename() over PATH, fsync the
 * directory. A crash leaves either the old file or the new one, never a mix;
 * a stray .tmp file is harmless. Loading checks size, header and checksum
 * before it touches the trainer, so a bad file leaves the trainer as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_int.h"

enum { HDR = 64, VERSION = 1 };
static const char MAGIC[8] = {'R', 'M', 'T', 'R', 'A', 'I', 'N', '1'};

typedef struct hdr {
  char magic[8];
  uint32_t version, hdr_size;
  uint64_t step, nparams;
  uint32_t in, hidden, out, act;
  uint64_t seed, payload_fnv;
} hdr_t;
_Static_assert(sizeof(hdr_t) == HDR, "checkpoint header is 64 bytes");

static uint64_t payload_fnv(const rm__mlp_t *m)
{
  /* FNV-1a is a byte stream: hash params then velocity as one. */
  uint64_t h = 0xcbf29ce484222325ULL;
  const float *parts[2] = {m->params, m->velocity};
  for (int k = 0; k < 2; k++) {
    const unsigned char *p = (const unsigned char *)parts[k];
    for (size_t i = 0; i < m->nparams * sizeof(float); i++) {
      h ^= p[i];
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

static void fill_hdr(const rm__trainer_t *t, hdr_t *h)
{
  memset(h, 0, sizeof(*h));
  memcpy(h->magic, MAGIC, 8);
  h->version = VERSION;
  h->hdr_size = HDR;
  h->step = t->step;
  h->nparams = t->model.nparams;
  h->in = t->model.in;
  h->hidden = t->model.hidden;
  h->out = t->model.out;
  h->act = (uint32_t)t->model.act;
  h->seed = t->cfg.seed;
}

static int fsync_dir(const char *path)
{
  char *copy = strdup(path);
  if (!copy) return -1;
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  free(copy);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

rm_status_t rm__trainer_save(const rm__trainer_t *t, const char *path,
                             char *err, size_t errlen)
{
  char tmp[4096];
  hdr_t h;
  size_t n = t->model.nparams;
  fill_hdr(t, &h);
  h.payload_fnv = payload_fnv(&t->model);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, errlen, "checkpoint %s: %s", tmp, strerror(errno));
    return RM_ERR_SYSTEM;
  }
  int ok = fwrite(&h, sizeof(h), 1, f) == 1 &&
           fwrite(t->model.params, sizeof(float), n, f) == n &&
           fwrite(t->model.velocity, sizeof(float), n, f) == n &&
           fflush(f) == 0 && fsync(fileno(f)) == 0;
  int saved = errno;
  if (fclose(f) != 0 && ok) ok = 0, saved = errno;
  if (ok && rename(tmp, path) != 0) ok = 0, saved = errno;
  if (!ok) {
    unlink(tmp);
    snprintf(err, errlen, "checkpoint %s: %s", path, strerror(saved));
    return RM_ERR_SYSTEM;
  }
  if (fsync_dir(path) != 0) {
    snprintf(err, errlen, "checkpoint %s: fsync of directory: %s", path,
             strerror(errno));
    return RM_ERR_SYSTEM;
  }
  return RM_OK;
}

/* Read the header and payload into fresh buffers, checking everything. */
static rm_status_t read_file(const rm__trainer_t *t, const char *path,
                             hdr_t *h, float *buf, char *err, size_t errlen)
{
  hdr_t want;
  size_t n = t->model.nparams;
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "checkpoint %s: %s", path, strerror(errno));
    return errno == ENOENT ? RM_ERR_NOT_FOUND : RM_ERR_SYSTEM;
  }
  rm_status_t st = RM_ERR_INVALID_ARG;
  fill_hdr(t, &want);
  if (fread(h, sizeof(*h), 1, f) != 1 || memcmp(h->magic, MAGIC, 8) ||
      h->version != VERSION || h->hdr_size != HDR) {
    snprintf(err, errlen, "checkpoint %s: not a version-%d ringmaster train "
             "checkpoint", path, VERSION);
  } else if (h->nparams != n || h->in != want.in ||
             h->hidden != want.hidden || h->out != want.out ||
             h->act != want.act || h->seed != want.seed) {
    snprintf(err, errlen, "checkpoint %s: written for another model or seed "
             "(hidden %u act %u seed %llu, this job: hidden %u act %u seed "
             "%llu)", path, h->hidden, h->act, (unsigned long long)h->seed,
             want.hidden, want.act, (unsigned long long)want.seed);
  } else if (fread(buf, sizeof(float), 2 * n, f) != 2 * n ||
             fgetc(f) != EOF) {
    snprintf(err, errlen, "checkpoint %s: truncated or over-long payload "
             "(want %zu bytes)", path, HDR + 8 * n);
  } else {
    rm__mlp_t view = {.nparams = n, .params = buf, .velocity = buf + n};
    if (payload_fnv(&view) != h->payload_fnv)
      snprintf(err, errlen, "checkpoint %s: payload checksum mismatch", path);
    else
      st = RM_OK;
  }
  fclose(f);
  return st;
}

rm_status_t rm__trainer_load(rm__trainer_t *t, const char *path, char *err,
                             size_t errlen)
{
  hdr_t h;
  size_t n = t->model.nparams;
  float *buf = malloc(2 * n * sizeof(float));
  if (!buf) return RM_ERR_NOMEM;
  rm_status_t st = read_file(t, path, &h, buf, err, errlen);
  if (st == RM_OK) {
    memcpy(t->model.params, buf, n * sizeof(float));
    memcpy(t->model.velocity, buf + n, n * sizeof(float));
    t->step = h.step;
    t->have_prev = 0;
  }
  free(buf);
  return st;
}
