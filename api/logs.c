/*
 * logs.c - GET /api/v1/jobs/{id}/workers/{index}/log: the tail of one
 * worker's log, as text/plain.
 *
 * Where logs are. The local and slurm launchers write a worker's stdout and
 * stderr to <log_dir>/job-<id>/worker-<index>.log, where log_dir is
 * `serve --log-dir`; the launchers say where (rm_api_options_t.log_location,
 * wired by serve/) and index is the
 * worker's LAUNCH INDEX (RINGMASTER_LAUNCH_INDEX / SLURM_PROCID; the
 * "launch_index" of GET .../workers), NOT its rank: the two are equal only
 * in a job's first generation (after a shrink ranks move; a replacement
 * gets the next launch index, >= the world size). Other launchers (k8s,
 * none) start nothing here: 404.
 *
 * Confinement (never a path outside the job's log folder):
 *   1. {id} and {index} must be canonical decimal numbers (rm__parse_id): no '/', no
 *      "..", no NUL can reach a path; index < world of the job's spec, or
 *      the launch index of one of its workers (a relaunched replacement).
 *   2. The path is built by us: "job-<id>" then "worker-<index>.log".
 *   3. Both components are opened with O_NOFOLLOW (the folder with
 *      O_DIRECTORY, the file relative to it with openat), so a symbolic link
 *      planted at either place is refused instead of followed; the file must
 *      be a regular file (fstat), so a FIFO or device cannot block or leak.
 *
 * Query (at most one of the three):
 *   ?tail=N    the last N lines (1..100000); a final line without '\n'
 *              counts as a line
 *   ?bytes=N   the last N bytes (1..RM__LOG_MAX)
 *   ?offset=N  from file offset N on (following a log: ask again with
 *              offset = X-Log-Offset + body length; N past the end gives an
 *              empty body, X-Log-Offset then the file size)
 *   none       the whole file
 * The answer never exceeds RM__LOG_MAX bytes (the end of the file wins;
 * with ?offset its start).
 * Headers: X-Log-Size (file size in bytes when read) and X-Log-Offset (file
 * offset of the first byte of the body), so a client knows what it missed.
 *
 * SECRETS MASKED (docs/security.md). Every occurrence of one of the job's
 * env values (RM__MASK_MIN bytes or longer: shorter ones such as "2" would
 * mask ordinary text) in the body is replaced by "***", as CI systems mask
 * secrets in build logs. The body is then no longer the file's bytes, so
 * X-Log-Next-Offset gives the file offset to ask for next (?offset=);
 * following with offset = X-Log-Offset + body length is right only for a
 * log without secrets. A following read (?offset) also masks a secret that
 * straddles its start (it reads up to RM__MASK_CTX bytes before the offset
 * and drops their masked text) and holds back a final piece of the body
 * that could be the start of a secret (RM__MASK_MIN bytes or more), which
 * the next read then sees whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api_int.h"
#include "rm_alloc.h"

#define RM__LOG_MAX (1u << 20)
#define RM__MASK_MIN 4
#define RM__MASK_CTX 4096 /* longer than any env value (RM_COORD_ENV_BYTES) */
#define RM__LOG_MAX_LINES 100000

/* Open the log the launchers wrote for (id, index), at the folder and file
 * name their log_location gives, read-only without following a link at
 * either level. Returns the fd or -1 (errno set). */
static int open_log(const rm_api_t *api, uint64_t id, unsigned index)
{
  char dir[4096 + 32], file[256];
  int dfd, fd, saved;

  if (api->log_location(api->log_ctx, id, (int)index, dir, sizeof dir, file, sizeof file)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return -1;
  fd = openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  saved = errno;
  close(dfd);
  errno = saved;
  return fd;
}

/* Read [off, off+len) of fd into a new NUL-terminated buffer; *got bytes. */
static char *read_range(int fd, off_t off, size_t len, size_t *got)
{
  char *buf = rm__xmalloc(len + 1);
  size_t n = 0;
  while (n < len) {
    ssize_t r = pread(fd, buf + n, len - n, off + (off_t)n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break; /* EOF (file truncated meanwhile) or error: what we have */
    n += (size_t)r;
  }
  buf[n] = '\0';
  *got = n;
  return buf;
}

/* The job's env values worth masking, as pointers into spec->env. */
static int secrets(const rm_job_spec_t *s, const char **v, size_t *vl)
{
  const char *p = s->env;
  int n = 0;
  for (int i = 0; i < s->env_count && n < RM_COORD_ENV_MAX; i++, p = rm_job_spec_next(p)) {
    const char *eq = strchr(p, '=');
    if (eq && strlen(eq + 1) >= RM__MASK_MIN) {
      v[n] = eq + 1;
      vl[n++] = strlen(eq + 1);
    }
  }
  return n;
}

/* buf[0..n) with every secret made "***", into a new buffer (*outn bytes).
 * Raw bytes [0, ctx) are context only: their output is dropped (*dropped
 * output bytes), a secret that crosses ctx included. With hold, a final
 * raw piece that is a proper prefix (>= RM__MASK_MIN bytes) of a secret is
 * left out; *used is the raw bytes consumed. */
static char *mask(const char *buf, size_t n, size_t ctx, int hold, const char **v,
                  const size_t *vl, int nv, size_t *outn, size_t *used)
{
  char *out = rm__xmalloc(n + 1); /* "***" never outgrows a >= 4-byte secret */
  size_t i = 0, o = 0, drop = 0;
  int crossed = 0;
  while (i < n) {
    size_t m = 0;
    if (!crossed && i >= ctx) {
      drop = o;
      crossed = 1;
    }
    for (int k = 0; k < nv && !m; k++) {
      if (vl[k] <= n - i && !memcmp(buf + i, v[k], vl[k])) m = vl[k];
      else if (hold && vl[k] > n - i && n - i >= RM__MASK_MIN && !memcmp(buf + i, v[k], n - i))
        goto held;
    }
    if (m) {
      memcpy(out + o, "***", 3);
      o += 3;
      i += m;
    } else {
      out[o++] = buf[i++];
    }
  }
held:
  if (!crossed) drop = o;
  *used = i;
  memmove(out, out + drop, o - drop);
  out[o - drop] = '\0';
  *outn = o - drop;
  return out;
}

/* Start of the last `lines` lines in buf[0..n). */
static size_t tail_lines(const char *buf, size_t n, uint64_t lines)
{
  size_t i = n;
  uint64_t seen = 0;
  if (i > 0 && buf[i - 1] == '\n') i--; /* the final newline ends the last line */
  while (i > 0) {
    if (buf[i - 1] == '\n' && ++seen == lines) return i;
    i--;
  }
  return 0;
}

/* 404 with the reason a log is absent; logs nothing (a client's typo). */
static void not_found(rm__resp_t *resp, uint64_t id, unsigned index, const char *why)
{
  rm__resp_error(resp, 404, "not_found", NULL, "no log for worker %u of job %llu: %s", index,
                 (unsigned long long)id, why);
}

/* 1 when a worker of job id was launched with this index (a replacement's
 * index is past the world size). */
static int has_launch_index(rm_coord_t *coord, uint64_t id, int index)
{
  rm_worker_info_t *w = NULL;
  size_t n = 0;
  int found = 0;
  if (rm_coord_job_workers(coord, id, &w, &n) != RM_OK) return 0;
  for (size_t i = 0; i < n && !found; i++) found = w[i].launch_index == index;
  rm_coord_free(w);
  return found;
}

/* Validates the request; 0 and *index, *tail, *bytes when it may proceed. */
static int parse(rm__req_t *req, rm__resp_t *resp, uint64_t id, unsigned *index,
                 uint64_t *tail, uint64_t *bytes, uint64_t *offset, int *has_offset,
                 rm_job_info_t *job)
{
  rm_job_info_t info;
  uint64_t ix;
  rm_status_t st;
  int world;

  if (rm__parse_id(req->params[1], &ix) != 0 || ix > 65535) {
    rm__resp_error(resp, 404, "not_found", NULL, "no worker '%.64s' (want a worker index)",
                   req->params[1]);
    return -1;
  }
  *index = (unsigned)ix;
  if (rm__req_query_u64(req, resp, "tail", 1, RM__LOG_MAX_LINES, tail) ||
      rm__req_query_u64(req, resp, "bytes", 1, RM__LOG_MAX, bytes))
    return -1;
  if (rm__req_query_u64(req, resp, "offset", 0, (uint64_t)1 << 62, offset)) return -1;
  *has_offset = rm__req_query(req, "offset") != NULL;
  if ((*tail != 0) + (*bytes != 0) + *has_offset > 1) {
    rm__resp_error(resp, 400, "invalid_value", *has_offset ? "offset" : "bytes",
                   "give at most one of tail (lines), bytes and offset");
    return -1;
  }
  st = rm_coord_job_get(req->api->coord, id, &info);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "worker log", id);
    return -1;
  }
  world = info.spec.world_size > 0 ? info.spec.world_size : info.spec.max_workers;
  if (strcmp(info.spec.launcher, "local") != 0 && strcmp(info.spec.launcher, "slurm") != 0) {
    not_found(resp, id, *index, "its workers were not started by the local or slurm launcher");
    return -1;
  }
  if ((int)*index >= world && !has_launch_index(req->api->coord, id, (int)*index)) {
    not_found(resp, id, *index, "no worker of the job has this launch index");
    return -1;
  }
  if (req->api->log_location == NULL) {
    not_found(resp, id, *index, "this coordinator was started without a log folder");
    return -1;
  }
  *job = info;
  return 0;
}

void rm__h_worker_log(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id, tail = 0, bytes = 0, from = 0;
  int has_from = 0;
  unsigned index;
  struct stat sb;
  size_t want, got, start = 0;
  off_t off;
  char *buf = NULL, *masked;
  int fd = -1, nv;
  rm_job_info_t *job = rm__xmalloc(sizeof *job);
  const char *v[RM_COORD_ENV_MAX];
  size_t vl[RM_COORD_ENV_MAX], ctx = 0, mn, used;

  if (rm__req_job_id(req, resp, &id) ||
      parse(req, resp, id, &index, &tail, &bytes, &from, &has_from, job))
    goto exit;
  nv = secrets(&job->spec, v, vl);
  fd = open_log(req->api, id, index);
  if (fd < 0) {
    not_found(resp, id, index, errno == ENOENT ? "the launcher has not written it (yet)"
                                               : "it is not a plain file in the job's log folder");
    goto exit;
  }
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    not_found(resp, id, index, "it is not a plain file in the job's log folder");
    goto exit;
  }
  want = (size_t)sb.st_size < RM__LOG_MAX ? (size_t)sb.st_size : RM__LOG_MAX;
  if (bytes && bytes < want) want = (size_t)bytes;
  off = sb.st_size - (off_t)want;
  if (has_from) { /* from the offset on, at most RM__LOG_MAX: the start wins */
    off = (off_t)from < sb.st_size ? (off_t)from : sb.st_size;
    want = (size_t)(sb.st_size - off) < RM__LOG_MAX ? (size_t)(sb.st_size - off) : RM__LOG_MAX;
  }
  if (has_from && nv) ctx = off < (off_t)RM__MASK_CTX ? (size_t)off : RM__MASK_CTX;
  buf = read_range(fd, off - (off_t)ctx, want + ctx, &got);
  if (got < ctx) ctx = got; /* truncated meanwhile */
  masked = mask(buf, got, ctx, has_from, v, vl, nv, &mn, &used);
  free(buf);
  buf = masked;
  if (tail) start = tail_lines(buf, mn, tail);
  if (start) memmove(buf, buf + start, mn - start + 1);
  rm__resp_text(resp, 200, "text/plain; charset=utf-8", buf, mn - start);
  buf = NULL;
  resp->extra[2].name = "X-Log-Next-Offset";
  snprintf(resp->extra[2].value, sizeof resp->extra[2].value, "%lld",
           (long long)(off - (off_t)ctx + (off_t)used));
  resp->extra[0].name = "X-Log-Size";
  snprintf(resp->extra[0].value, sizeof resp->extra[0].value, "%lld", (long long)sb.st_size);
  resp->extra[1].name = "X-Log-Offset";
  snprintf(resp->extra[1].value, sizeof resp->extra[1].value, "%lld",
           (long long)(off + (off_t)(nv ? 0 : start))); /* masked: where the range began */
exit:
  free(buf);
  free(job);
  if (fd >= 0) close(fd);
}
