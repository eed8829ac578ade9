/*
 * checkpoint.c - the trainer's state on disk, in the ONE checkpoint format
 * of the project (worker/checkpoint/checkpoint.c: 64-byte header with job,
 * step, generation, rank, world, CRC-32 of header and payload; atomic
 * write = temp file, fsync, rename, fsync dir; validated read).
 *
 * The payload the trainer puts in it:
 *
 *   offset   size         description
 *   0        8            magic "RMTRAIN2" (model descriptor follows)
 *   8        4            model input size      (must match the loader)
 *   12       4            hidden units          (must match option hidden)
 *   16       4            output classes
 *   20       4            activation (0 relu, 1 tanh)
 *   24       8            seed (data order; must match option seed)
 *   32       8            nparams
 *   40       4*nparams    parameters, f32
 *   40+4n    4*nparams    momentum buffer, f32
 *
 * The header's step is the trainer's step (updates applied). Loading checks
 * the file completely (format, CRCs, size) and then the descriptor against
 * this trainer BEFORE touching it, so a bad or foreign file leaves the
 * trainer as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "train_int.h"

typedef struct desc {
  char magic[8];
  uint32_t in, hidden, out, act;
  uint64_t seed, nparams;
} desc_t;
_Static_assert(sizeof(desc_t) == 40, "model descriptor is 40 bytes");

static const char MAGIC[8] = {'R', 'M', 'T', 'R', 'A', 'I', 'N', '2'};

static void fill_desc(const rm__trainer_t *t, desc_t *d)
{
  memset(d, 0, sizeof(*d));
  memcpy(d->magic, MAGIC, 8);
  d->in = t->model.in;
  d->hidden = t->model.hidden;
  d->out = t->model.out;
  d->act = (uint32_t)t->model.act;
  d->seed = t->cfg.seed;
  d->nparams = t->model.nparams;
}

rm_status_t rm__trainer_save(const rm__trainer_t *t, const char *dir,
                             uint64_t job_id, int rank, uint64_t generation,
                             char *path, size_t path_len, char *err,
                             size_t errlen)
{
  desc_t d;
  size_t bytes = t->model.nparams * sizeof(float);
  fill_desc(t, &d);
  rm__ckpt_meta_t m = {.job_id = job_id, .step = t->step,
                       .generation = generation, .rank = rank, .world = 1};
  struct iovec iov[3] = {{&d, sizeof(d)},
                         {t->model.params, bytes},
                         {t->model.velocity, bytes}};
  return rm__ckpt_writev(dir, &m, iov, 3, path, path_len, err, errlen);
}

rm_status_t rm__trainer_load(rm__trainer_t *t, const char *path, char *err,
                             size_t errlen)
{
  rm__ckpt_meta_t m;
  void *payload = NULL;
  desc_t want, got;
  size_t n = t->model.nparams;
  rm_status_t st = rm__ckpt_read(path, &m, &payload, err, errlen);
  if (st != RM_OK) return st;
  fill_desc(t, &want);
  if (m.payload_len >= sizeof(got)) memcpy(&got, payload, sizeof(got));
  else memset(&got, 0, sizeof(got));
  if (m.payload_len != sizeof(want) + 2 * n * sizeof(float) ||
      memcmp(&got, &want, sizeof(want))) {
    snprintf(err, errlen, "checkpoint %s: written for another model or seed "
             "(hidden %u act %u seed %llu params %llu; this job: hidden %u "
             "act %u seed %llu params %llu)", path, got.hidden, got.act,
             (unsigned long long)got.seed, (unsigned long long)got.nparams,
             want.hidden, want.act, (unsigned long long)want.seed,
             (unsigned long long)want.nparams);
    st = RM_ERR_INVALID_ARG;
  } else {
    const float *p = (const float *)((const char *)payload + sizeof(want));
    memcpy(t->model.params, p, n * sizeof(float));
    memcpy(t->model.velocity, p + n, n * sizeof(float));
    t->step = m.step;
    t->have_prev = 0;
  }
  free(payload);
  return st;
}

rm_status_t rm__trainer_load_step(rm__trainer_t *t, const char *dir,
                                  uint64_t job_id, int max_rank, uint64_t step,
                                  char *err, size_t errlen)
{
  char path[4096];
  rm_status_t st = RM_ERR_NOT_FOUND;
  snprintf(err, errlen, "no checkpoint of job %llu step %llu in %s",
           (unsigned long long)job_id, (unsigned long long)step, dir);
  /* Every rank's file of a step holds the same bytes: take the first good. */
  for (int r = 0; r < max_rank && st != RM_OK; r++) {
    if (rm__ckpt_path(dir, job_id, r, step, path, sizeof(path)) != RM_OK)
      break;
    char e[512];
    rm_status_t s = rm__trainer_load(t, path, e, sizeof(e));
    if (s == RM_OK) st = RM_OK;
    else if (s != RM_ERR_NOT_FOUND) snprintf(err, errlen, "%s", e);
  }
  return st;
}
