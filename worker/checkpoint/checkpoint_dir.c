/*
 * checkpoint_dir.c - the checkpoints of a directory: newest valid one,
 * keep-last-K cleanup (file format and atomic write in checkpoint.c).
 *
 * Only names of the exact form ckpt-j<job>-r<rank>-s<step:020>.rmck count
 * (parsed, then re-printed and compared, so "ckpt-j1-r0-s5.rmck" or a
 * backup copy "...rmck~" is never taken for a checkpoint). Zero-padded
 * steps make name order equal step order, but the code sorts the parsed
 * steps rather than relying on it.
 *
 * NEWEST VALID: candidates newest first; each is read and fully validated
 * (header + payload CRC, and the header must name the same job, rank and
 * step as the file name); the first that passes wins. A torn or corrupt
 * newer file therefore never hides an older good one.
 *
 * PRUNE: delete all but the `keep` newest by step (it is called after a
 * successful write, so the newest is valid), plus leftover temp files
 * ".ckpt-j<job>-r<rank>-s*.rmck.tmp" of crashed writers of the same
 * (job, rank): with one writer per (dir, job, rank) none of them can be in
 * use by the caller's own writer between writes. Then fsync the directory.
 */
#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint_int.h"

/* ---- listing: steps of (job, rank) in dir, newest first ---- */
static int parse_name(const char *name, uint64_t job_id, int rank, uint64_t *step)
{
  char want[128];
  uint64_t j, s;
  int r;
  if (sscanf(name, "ckpt-j%" SCNu64 "-r%d-s%" SCNu64 ".rmck", &j, &r, &s) != 3)
    return 0;
  if (j != job_id || r != rank) return 0;
  snprintf(want, sizeof want, "ckpt-j%" PRIu64 "-r%d-s%020" PRIu64 ".rmck", j, r, s);
  if (strcmp(want, name) != 0) return 0; /* strict: exactly our own names */
  *step = s;
  return 1;
}

static int cmp_desc(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x < y) - (x > y);
}

/* OUT *steps (malloc'd, newest first), *n. */
static rm_status_t list_steps(const char *dir, uint64_t job_id, int rank,
                              uint64_t **steps, size_t *n, char *err, size_t errlen)
{
  DIR *d = opendir(dir);
  uint64_t *v = NULL, s;
  size_t cnt = 0, cap = 0;
  struct dirent *e;
  if (d == NULL) {
    rm__ckpt_seterr(err, errlen, "checkpoint dir %s: %s", dir, strerror(errno));
    return errno == ENOENT ? RM_ERR_NOT_FOUND : RM_ERR_SYSTEM;
  }
  while ((e = readdir(d)) != NULL) {
    if (!parse_name(e->d_name, job_id, rank, &s)) continue;
    if (cnt == cap) {
      size_t ncap = cap ? 2 * cap : 16;
      uint64_t *nv = realloc(v, ncap * sizeof *nv);
      if (nv == NULL) {
        free(v);
        closedir(d);
        return RM_ERR_NOMEM;
      }
      v = nv;
      cap = ncap;
    }
    v[cnt++] = s;
  }
  closedir(d);
  if (cnt > 1) qsort(v, cnt, sizeof *v, cmp_desc);
  *steps = v;
  *n = cnt;
  return RM_OK;
}

rm_status_t rm__ckpt_latest(const char *dir, uint64_t job_id, int rank,
                            char *path, size_t path_len, rm__ckpt_meta_t *meta,
                            char *err, size_t errlen)
{
  uint64_t *steps = NULL;
  size_t n = 0;
  char p[4096], why[4096 + 512];
  if (dir == NULL || rank < 0) return RM_ERR_INVALID_ARG;
  rm_status_t st = list_steps(dir, job_id, rank, &steps, &n, err, errlen);
  if (st != RM_OK) return st;
  st = RM_ERR_NOT_FOUND;
  rm__ckpt_seterr(err, errlen, "no valid checkpoint of job %" PRIu64 " rank %d in %s",
         job_id, rank, dir);
  for (size_t i = 0; i < n; i++) {
    rm__ckpt_meta_t m;
    void *payload = NULL;
    if (rm__ckpt_path(dir, job_id, rank, steps[i], p, sizeof p) != RM_OK) continue;
    rm_status_t rst = rm__ckpt_read(p, &m, &payload, why, sizeof why);
    free(payload);
    if (rst == RM_OK && (m.job_id != job_id || m.rank != rank || m.step != steps[i])) {
      snprintf(why, sizeof why, "checkpoint %s: header names job %" PRIu64
               " rank %d step %" PRIu64 ", not its file name", p, m.job_id, m.rank, m.step);
      rst = RM_ERR_INVALID_ARG;
    }
    if (rst == RM_ERR_NOMEM) { st = rst; break; }
    if (rst != RM_OK) {
      RM_WARN("skipping invalid checkpoint: %s", why);
      continue;
    }
    if (path != NULL) snprintf(path, path_len, "%s", p);
    if (meta != NULL) *meta = m;
    st = RM_OK;
    break;
  }
  free(steps);
  return st;
}

static int remove_temps(const char *dir, uint64_t job_id, int rank)
{
  char prefix[96];
  int removed = 0;
  struct dirent *e;
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int pl = snprintf(prefix, sizeof prefix, ".ckpt-j%" PRIu64 "-r%d-s", job_id, rank);
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, prefix, (size_t)pl) != 0 || len < 9 ||
        strcmp(e->d_name + len - 9, ".rmck.tmp") != 0)
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
  }
  closedir(d);
  return removed;
}

rm_status_t rm__ckpt_prune(const char *dir, uint64_t job_id, int rank,
                           int keep, int *removed, char *err, size_t errlen)
{
  uint64_t *steps = NULL;
  size_t n = 0;
  char p[4096];
  int gone = 0;
  if (dir == NULL || rank < 0 || keep < 1) return RM_ERR_INVALID_ARG;
  rm_status_t st = list_steps(dir, job_id, rank, &steps, &n, err, errlen);
  if (st != RM_OK) return st;
  for (size_t i = (size_t)keep; i < n; i++) {
    if (rm__ckpt_path(dir, job_id, rank, steps[i], p, sizeof p) != RM_OK) continue;
    if (unlink(p) == 0) {
      gone++;
    } else if (errno != ENOENT) {
      rm__ckpt_seterr(err, errlen, "checkpoint %s: unlink: %s", p, strerror(errno));
      st = RM_ERR_SYSTEM;
    }
  }
  free(steps);
  gone += remove_temps(dir, job_id, rank);
  if (gone > 0 && rm__ckpt_fsync_dir(dir) != 0 && st == RM_OK) {
    rm__ckpt_seterr(err, errlen, "checkpoint dir %s: fsync: %s", dir, strerror(errno));
    st = RM_ERR_SYSTEM;
  }
  if (removed != NULL) *removed = gone;
  return st;
}
