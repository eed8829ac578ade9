/*
 * mr.c - the registration cache of mr.h (design there) and the public
 * rm_comm_register / rm_comm_deregister.
 *
 * The cache is an array of entry pointers (entries stay put; the array
 * is searched linearly: it holds at most RINGMASTER_REG_CACHE idle entries
 * plus those in use and the user's, tens in practice).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"
#include "rm_log.h"
#include "rm_param.h"
#include "transport/mr.h"
#include "transport/offer.h"

RM_PARAM(reg_cache, "RINGMASTER_REG_CACHE", 64)

#define PAGE ((uintptr_t)4096)

struct rm__mr_cache {
  rm__mr_t **e;
  int n, cap, max_idle;
  uint64_t clock, regs, hits;
};

static struct rm__mr_cache *cache_of(rm_comm_t *c)
{
  if (c->mrc == NULL) {
    struct rm__mr_cache *k = calloc(1, sizeof *k);
    if (k == NULL) return NULL;
    k->max_idle = (int)rm__param_reg_cache();
    if (k->max_idle < 0) k->max_idle = 0;
    c->mrc = k;
  }
  return c->mrc;
}

/* Deregister m from every transport and free it; removes slot i. */
static void drop(rm_comm_t *c, struct rm__mr_cache *k, int i)
{
  rm__mr_t *m = k->e[i];
  for (int t = 0; t < RM__TP_COUNT; t++) {
    const rm__transport_ops_t *ops = rm__tp_by_id((rm__tp_id_t)t);
    if (m->tp[t].h && ops && ops->dereg_mr) ops->dereg_mr(c, m->tp[t].h);
  }
  free(m);
  k->e[i] = k->e[--k->n];
}

/* Keep at most `keep` idle (unused, not the user's) entries, LRU out. */
static void trim(rm_comm_t *c, struct rm__mr_cache *k, int keep)
{
  for (;;) {
    int idle = 0, lru = -1;
    for (int i = 0; i < k->n; i++) {
      if (k->e[i]->refs > 0 || k->e[i]->user) continue;
      idle++;
      if (lru < 0 || k->e[i]->used < k->e[lru]->used) lru = i;
    }
    if (idle <= keep || lru < 0) return;
    drop(c, k, lru);
  }
}

/* Register entry m with transport t (m->tp[t] empty). */
static rm_status_t reg_one(rm_comm_t *c, struct rm__mr_cache *k, rm__mr_t *m,
                           const rm__transport_ops_t *t, int need_write)
{
  int rw = 0;
  rm_status_t st = t->reg_mr(c, (void *)m->addr, m->len, need_write, &m->tp[t->id].h, &rw);
  if (st != RM_OK) {
    m->tp[t->id].h = NULL;
    return st;
  }
  m->tp[t->id].rw = rw;
  k->regs++;
  return RM_OK;
}

static rm__mr_t *new_entry(struct rm__mr_cache *k, uintptr_t lo, uintptr_t hi)
{
  rm__mr_t *m;
  if (k->n == k->cap) {
    int cap = k->cap ? 2 * k->cap : 16;
    rm__mr_t **e = realloc(k->e, (size_t)cap * sizeof *e);
    if (e == NULL) return NULL;
    k->e = e;
    k->cap = cap;
  }
  if ((m = calloc(1, sizeof *m)) == NULL) return NULL;
  m->addr = lo;
  m->len = hi - lo;
  k->e[k->n++] = m;
  return m;
}

static void page_range(const void *buf, size_t len, uintptr_t *lo, uintptr_t *hi)
{
  uintptr_t a = (uintptr_t)buf;
  *lo = a & ~(PAGE - 1);
  *hi = (a + len + PAGE - 1) & ~(PAGE - 1);
}

rm__mr_t *rm__mr_acquire(rm_comm_t *c, rm__tp_id_t id, const void *buf, size_t len,
                         int need_write, rm_status_t *st)
{
  const rm__transport_ops_t *t = rm__tp_by_id(id);
  struct rm__mr_cache *k = cache_of(c);
  uintptr_t a = (uintptr_t)buf, lo, hi;
  rm__mr_t *m = NULL, *bare = NULL;
  *st = RM_ERR_NOMEM;
  if (k == NULL) return NULL;
  if (t == NULL || t->reg_mr == NULL || len == 0) {
    *st = RM_ERR_INVALID_ARG;
    errno = EINVAL;
    return NULL;
  }
  for (int i = 0; i < k->n; i++) {
    rm__mr_t *e = k->e[i];
    if (e->addr > a || a + len > e->addr + e->len) continue;
    if (e->tp[id].h && (e->tp[id].rw || !need_write)) {
      m = e;
      k->hits++;
      break;
    }
    if (e->tp[id].h == NULL && bare == NULL) bare = e;
  }
  if (m == NULL && bare != NULL && (*st = reg_one(c, k, bare, t, need_write)) == RM_OK &&
      (bare->tp[id].rw || !need_write))
    m = bare;
  if (m == NULL) {
    trim(c, k, k->max_idle > 0 ? k->max_idle - 1 : 0);
    page_range(buf, len, &lo, &hi);
    if ((m = new_entry(k, lo, hi)) == NULL) {
      *st = RM_ERR_NOMEM;
      return NULL;
    }
    if ((*st = reg_one(c, k, m, t, need_write)) != RM_OK) {
      int e = errno;
      drop(c, k, k->n - 1);
      errno = e;
      return NULL;
    }
  }
  m->refs++;
  m->used = ++k->clock;
  *st = RM_OK;
  return m;
}

void rm__mr_release(rm_comm_t *c, rm__mr_t *m)
{
  struct rm__mr_cache *k = c->mrc;
  if (m == NULL || m->refs <= 0) return;
  m->refs--;
  /* RINGMASTER_REG_CACHE=0: nothing idle is kept */
  if (m->refs == 0 && k && k->max_idle == 0 && !m->user) trim(c, k, 0);
}

void rm__mr_free_all(rm_comm_t *c)
{
  struct rm__mr_cache *k = c->mrc;
  if (k == NULL) return;
  while (k->n > 0) drop(c, k, k->n - 1);
  free(k->e);
  free(k);
  c->mrc = NULL;
}

void rm__mr_stats(const rm_comm_t *c, rm__mr_stats_t *out)
{
  const struct rm__mr_cache *k = c->mrc;
  memset(out, 0, sizeof *out);
  if (k == NULL) return;
  out->entries = k->n;
  out->regs = k->regs;
  out->hits = k->hits;
}

/* ---- public ---- */

rm_status_t rm_comm_register(rm_comm_t *c, void *buf, size_t len, rm_mr_t **out)
{
  struct rm__mr_cache *k;
  uintptr_t lo, hi;
  rm__mr_t *m;
  if (out) *out = NULL;
  if (c == NULL || buf == NULL || len == 0 || out == NULL) return RM_ERR_INVALID_ARG;
  if (rm_comm_status(c) != RM_OK) return rm_comm_status(c);
  if ((k = cache_of(c)) == NULL) return RM_ERR_NOMEM;
  page_range(buf, len, &lo, &hi);
  if ((m = new_entry(k, lo, hi)) == NULL) return RM_ERR_NOMEM;
  m->user = 1;
  m->used = ++k->clock;
  for (int i = 0; i < c->ntp_used; i++) {
    const rm__transport_ops_t *t = c->tp_used[i];
    if (t->reg_mr == NULL || c->tstate[t->id] == NULL) continue;
    rm_status_t st = reg_one(c, k, m, t, 0);
    if (st != RM_OK) {
      int e = errno;
      RM_ERROR("rank %d: %s: cannot register %zu bytes at %p: %s", c->rank, t->name, len,
               buf, strerror(e));
      drop(c, k, k->n - 1);
      return st;
    }
  }
  *out = m;
  return RM_OK;
}

rm_status_t rm_comm_deregister(rm_comm_t *c, rm_mr_t *mr)
{
  struct rm__mr_cache *k = c ? c->mrc : NULL;
  if (k == NULL || mr == NULL) return RM_ERR_INVALID_ARG;
  for (int i = 0; i < k->n; i++) {
    if (k->e[i] != mr) continue;
    if (!mr->user) return RM_ERR_INVALID_ARG; /* a cache entry, not the user's */
    mr->user = 0;
    if (mr->refs == 0) drop(c, k, i);
    return RM_OK;
  }
  return RM_ERR_INVALID_ARG;
}
