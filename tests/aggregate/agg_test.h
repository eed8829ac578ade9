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

#endif
