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
 *                          object (json_check.c, Jansson); else keep it on the
 *                          worker (w->cold->result, model.h) and in
 *                          workers.result
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
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

/* Top-level members every rank must report identically. */
static const char *const AGREE_KEYS[] = {"accuracy", "test_accuracy",
                                         "test_loss", "param_checksum"};
#define N_AGREE (sizeof AGREE_KEYS / sizeof AGREE_KEYS[0])

/* A value in words: numbers as %.15g (what a workload wrote, 0.9721, not
 * the double's 17 digits), integers as they are, strings bare, the rest
 * as JSON. */
static void value_words(const json_t *v, char *buf, size_t len)
{
  if (json_is_integer(v)) snprintf(buf, len, "%lld", (long long)json_integer_value(v));
  else if (json_is_real(v)) snprintf(buf, len, "%.15g", json_real_value(v));
  else if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
  else {
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, len, "%s", t ? t : "?");
    free(t);
  }
}

/* "accuracy 0.9721, test loss 0.1076, ...": numeric members in the order
 * written, '_' as ' '. */
static void words_of(const json_t *o, char *buf, size_t len)
{
  const char *key;
  json_t *v;
  size_t n = 0;
  buf[0] = '\0';
  json_object_foreach((json_t *)o, key, v) {
    char name[64], val[64];
    if (!json_is_number(v)) continue;
    snprintf(name, sizeof name, "%s", key);
    for (char *p = name; *p; p++)
      if (*p == '_') *p = ' ';
    value_words(v, val, sizeof val);
    int k = snprintf(buf + n, len - n, "%s%s %s", n ? ", " : "", name, val);
    if (k < 0 || (size_t)k >= len - n) { /* keep only whole members */
      buf[n] = '\0';
      break;
    }
    n += (size_t)k;
  }
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
  if (rm__json_check_object(text, n, &at, &why)) {
    rm__event(c, j, "result_refused", w->rank, "the result of rank %d was "
              "refused: %s at byte %zu (a JSON object is required); not stored",
              w->rank, why ? why : "invalid", at);
    return;
  }
  rm__worker_cold_t *x = rm__worker_cold(w);
  free(x->result);
  x->result = rm__xstrdup(text);
  rm__store_worker_result(c->store, w);
}

/* Compare w's result with the chosen one on AGREE_KEYS; event on the
 * first difference (numbers compare by value: 0.5 and 5e-1 agree). */
static void check_agree(rm_coord_t *c, rm__job_t *j, const json_t *ref,
                        const rm__worker_t *w, int *mismatches)
{
  const char *res = rm__worker_cold_get(w)->result;
  json_t *o = rm__json_object_parse(res, strlen(res), NULL, NULL);
  for (size_t k = 0; o && k < N_AGREE; k++) {
    const json_t *x = json_object_get(ref, AGREE_KEYS[k]);
    const json_t *y = json_object_get(o, AGREE_KEYS[k]);
    if (!x || !y || json_equal((json_t *)x, (json_t *)y)) continue;
    if (json_is_number(x) && json_is_number(y) &&
        json_number_value(x) == json_number_value(y))
      continue;
    char xs[64], ys[64];
    value_words(x, xs, sizeof xs);
    value_words(y, ys, sizeof ys);
    rm__event(c, j, "result_mismatch", w->rank, "rank %d reports %s %s but "
              "rank %d reports %s", w->rank, AGREE_KEYS[k], ys, j->result_rank, xs);
    (*mismatches)++;
    break;
  }
  json_decref(o);
}

void rm__result_settle(rm_coord_t *c, rm__job_t *j)
{
  const rm__worker_t *best = NULL;
  char words[200];
  int mismatches = 0, with_result = 0;
  for (int r = 0; r < j->nmembers && !best; r++)
    if (rm__worker_cold_get(&j->w[j->members[r]])->result) best = &j->w[j->members[r]];
  if (!best) return;
  free(j->result);
  j->result = rm__xstrdup(rm__worker_cold_get(best)->result);
  j->result_rank = best->rank;
  json_t *ref = rm__json_object_parse(j->result, strlen(j->result), NULL, NULL);
  if (ref) words_of(ref, words, sizeof words);
  else words[0] = '\0';
  for (int r = 0; r < j->nmembers; r++) {
    const rm__worker_t *w = &j->w[j->members[r]];
    if (!rm__worker_cold_get(w)->result) continue;
    with_result++;
    if (w != best && ref) check_agree(c, j, ref, w, &mismatches);
  }
  rm__store_job_result(c->store, j);
  char agree[96];
  if (mismatches)
    snprintf(agree, sizeof agree, "ranks DISAGREE, see result_mismatch");
  else
    snprintf(agree, sizeof agree, "%d of %d ranks reported one, they agree",
             with_result, j->nmembers);
  rm__event(c, j, "job_result", j->result_rank, "result of rank %d (%s): %s",
            j->result_rank, agree, words[0] ? words : "no numeric figures");
  json_decref(ref);
}
