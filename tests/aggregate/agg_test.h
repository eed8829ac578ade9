/*
 * agg_test.h - what the aggregation tests share (test_aggregate.c,
 * test_coord_vec.c, test_krum_vec.c): writing a value into a buffer of any
 * float dtype, rounded as the library rounds (f16/bf16 via f32, nearest
 * even; reduce/half.h).
 */
#ifndef RM_TESTS_AGGREGATE_AGG_TEST_H
#define RM_TESTS_AGGREGATE_AGG_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "reduce/half.h"
#include "ringmaster/ringmaster.h"

/* element idx of buf (dtype dt) = v */
static inline void agg_test_store(void *buf, size_t idx, rm_dtype_t dt, double v)
{
  switch (dt) {
  case RM_F32: ((float *)buf)[idx] = (float)v; break;
  case RM_F64: ((double *)buf)[idx] = v; break;
  case RM_F16: ((uint16_t *)buf)[idx] = rm__f2h((float)v); break;
  default: ((uint16_t *)buf)[idx] = rm__f2b((float)v); break;
  }
}

/* A kernel-versus-reference case's buffers: n rows of stride = len + 3
 * elements (dtype dt) filled with gen() in order, and two outputs of len
 * elements; exits when out of memory. */
typedef struct agg_test_bufs {
  char *rows, *o1, *o2;
  size_t stride, esz;
} agg_test_bufs_t;

static inline void agg_test_bufs_get(agg_test_bufs_t *t, int n, size_t len, rm_dtype_t dt,
                                     double (*gen)(void))
{
  t->stride = len + 3;
  t->esz = rm_dtype_size(dt);
  t->rows = malloc((size_t)n * t->stride * t->esz);
  t->o1 = malloc(len * t->esz);
  t->o2 = malloc(len * t->esz);
  if (!t->rows || !t->o1 || !t->o2) exit(1);
  for (size_t i = 0; i < (size_t)n * t->stride; i++) agg_test_store(t->rows, i, dt, gen());
}

static inline void agg_test_bufs_put(agg_test_bufs_t *t)
{
  free(t->rows);
  free(t->o1);
  free(t->o2);
}

#endif
