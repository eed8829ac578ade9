/*
 * result.c - a job's final result: the summary JSON each worker's workload
 * writes (worker/train: {"accuracy":0.9721,"test_loss":0.1076,...}) and
 * sends with its Leave call.
 *
 * Flow (all under c->mu, inside rm__lock's transaction):
 *
 *   Leave(ok, summary)  -> rm__result_offer: refuse it with a
 *                          "result_refused" event when it is longer than
 *                          RM_COORD_RESULT_MAX - 1 bytes or not one JSON
 *                          object (json_check.c); else keep it on the
 *                          worker (w->result) and in workers.result
 *   last member leaves  -> rm__result_settle, right before the job becomes
 *                          succeeded: the job's result is the one of the
 *                          LOWEST rank of the final generation that sent one
 *                          (rank 0 normally); every other member's result is
 *                          compared with it on the members that must not
 *                          depend on the rank (AGREE_KEYS: same parameters,
 *                          same held-out split); a difference is a
 *                          "result_mismatch" event naming rank, key and both
 *                          values. The result goes to jobs.result and an
 *                          event "job_result" says the figures in words.
 *
 * Failed and cancelled jobs have no job result (the workers that left
 * cleanly still have theirs in workers.result). The text is stored as the
 * worker sent it; api/ parses it with Jansson for GET /api/v1/jobs/{id}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

/* Top-level members every rank must report identically. */
static const char *const AGREE_KEYS[] = {"accuracy", "test_accuracy",
                                         "test_loss", "param_checksum"};
#define N_AGREE (sizeof AGREE_KEYS / sizeof AGREE_KEYS[0])

typedef struct span {
  const char *p;
  size_t n;
} span_t;

typedef struct agree {
  span_t v[N_AGREE];
} agree_t;

static int agree_index(const char *key, size_t klen)
{
  for (size_t k = 0; k < N_AGREE; k++)
    if (strlen(AGREE_KEYS[k]) == klen && !memcmp(AGREE_KEYS[k], key, klen))
      return (int)k;
  return -1;
}

static void collect_agree(void *ctx, const char *key, size_t klen,
                          const char *val, size_t vlen)
{
  agree_t *a = ctx;
  int k = agree_index(key, klen);
  if (k >= 0) a->v[k] = (span_t){val, vlen};
}

/* "accuracy 0.9721, test loss 0.1076, ...": numeric members, '_' as ' '. */
typedef struct words {
  char buf[200];
  size_t len;
} words_t;

static void add_words(void *ctx, const char *key, size_t klen,
                      const char *val, size_t vlen)
{
  words_t *w = ctx;
  size_t room = sizeof w->buf - w->len;
  if (!(val[0] == '-' || (val[0] >= '0' && val[0] <= '9'))) return;
  if (klen + vlen + 4 >= room) return;
  if (w->len) {
    memcpy(w->buf + w->len, ", ", 2);
    w->len += 2;
  }
  for (size_t i = 0; i < klen; i++)
    w->buf[w->len++] = key[i] == '_' ? ' ' : key[i];
  w->buf[w->len++] = ' ';
  memcpy(w->buf + w->len, val, vlen);
  w->len += vlen;
  w->buf[w->len] = '\0';
}

void rm__result_offer(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      const char *text)
{
  size_t n = text ? strlen(text) : 0, at = 0;
  const char *why = NULL;
  if (n == 0) return;
  if (n >= RM_COORD_RESULT_MAX) {
    rm__event(c, j, "result_refused", w->rank, "the result of rank %d is %zu "
              "bytes, over the %d-byte limit; not stored", w->rank, n,
              RM_COORD_RESULT_MAX - 1);
    return;
  }
  if (rm__json_check_object(text, n, NULL, NULL, &at, &why)) {
    rm__event(c, j, "result_refused", w->rank, "the result of rank %d was "
              "refused: %s at byte %zu (a JSON object is required); not stored",
              w->rank, why ? why : "invalid", at);
    return;
  }
  free(w->result);
  w->result = rm__xstrdup(text);
  rm__store_worker_result(c, w);
}

/* Compare w's result with the chosen one; event on the first difference. */
static void check_agree(rm_coord_t *c, rm__job_t *j, const agree_t *ref,
                        const rm__worker_t *w, int *mismatches)
{
  agree_t a;
  memset(&a, 0, sizeof a);
  rm__json_check_object(w->result, strlen(w->result), collect_agree, &a,
                        NULL, NULL);
  for (size_t k = 0; k < N_AGREE; k++) {
    const span_t *x = &ref->v[k], *y = &a.v[k];
    if (!x->p || !y->p) continue;
    if (x->n == y->n && !memcmp(x->p, y->p, x->n)) continue;
    rm__event(c, j, "result_mismatch", w->rank, "rank %d reports %s %.*s but "
              "rank %d reports %.*s", w->rank, AGREE_KEYS[k], (int)y->n, y->p,
              j->result_rank, (int)x->n, x->p);
    (*mismatches)++;
    return;
  }
}

void rm__result_settle(rm_coord_t *c, rm__job_t *j)
{
  const rm__worker_t *best = NULL;
  agree_t ref;
  words_t words;
  int mismatches = 0, with_result = 0;
  for (int r = 0; r < j->nmembers && !best; r++)
    if (j->w[j->members[r]].result) best = &j->w[j->members[r]];
  if (!best) return;
  free(j->result);
  j->result = rm__xstrdup(best->result);
  j->result_rank = best->rank;
  memset(&ref, 0, sizeof ref);
  memset(&words, 0, sizeof words);
  rm__json_check_object(j->result, strlen(j->result), collect_agree, &ref,
                        NULL, NULL);
  rm__json_check_object(j->result, strlen(j->result), add_words, &words,
                        NULL, NULL);
  for (int r = 0; r < j->nmembers; r++) {
    const rm__worker_t *w = &j->w[j->members[r]];
    if (!w->result) continue;
    with_result++;
    if (w != best) check_agree(c, j, &ref, w, &mismatches);
  }
  rm__store_job_result(c, j);
  char agree[96];
  if (mismatches)
    snprintf(agree, sizeof agree, "ranks DISAGREE, see result_mismatch");
  else
    snprintf(agree, sizeof agree, "%d of %d ranks reported one, they agree",
             with_result, j->nmembers);
  rm__event(c, j, "job_result", j->result_rank, "result of rank %d (%s): %s",
            j->result_rank, agree, words.len ? words.buf : "no numeric figures");
}
