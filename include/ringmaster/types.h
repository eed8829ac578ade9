/*
 * types.h - libringmaster's element types, reduction operators and
 * all-reduce algorithms, with their names and parsers.
 *
 * Included by ringmaster.h; stands alone (with status.h) so that code which
 * only names or parses them (the coordinator checking a job spec) needs
 * nothing else. Implemented in common/rm_types.c, compiled into
 * libringmaster and into rm_common.
 */
#ifndef RINGMASTER_TYPES_H
#define RINGMASTER_TYPES_H

#include <stddef.h>

#include "ringmaster/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element types and reduction operators ---- */
typedef enum {
  RM_F32 = 0,
  RM_F64 = 1,
  RM_F16 = 2,  /* IEEE binary16; reduced in f32, rounded once per step */
  RM_BF16 = 3, /* bfloat16; reduced in f32, rounded once per step */
  RM_I32 = 4,
  RM_I64 = 5,
  RM_U8 = 6,
  RM_DTYPE_COUNT
} rm_dtype_t;

typedef enum {
  RM_SUM = 0,
  RM_PROD = 1,
  RM_MIN = 2,
  RM_MAX = 3,
  RM_AVG = 4, /* sum, then divide by world size (integers: truncating) */
  RM_OP_COUNT
} rm_op_t;

RM_EXTERN size_t rm_dtype_size(rm_dtype_t dt); /* 0 for an invalid dtype */
RM_EXTERN const char *rm_dtype_name(rm_dtype_t dt);
RM_EXTERN const char *rm_op_name(rm_op_t op);
/* Parse "f32", "bf16", "sum", ...; return RM_ERR_INVALID_ARG for others. */
RM_EXTERN rm_status_t rm_dtype_parse(const char *s, rm_dtype_t *out);
RM_EXTERN rm_status_t rm_op_parse(const char *s, rm_op_t *out);

/* ---- all-reduce algorithms ---- */
typedef enum {
  RM_ALGO_AUTO = 0,             /* alpha-beta cost model picks one */
  RM_ALGO_RING = 1,             /* reduce-scatter + all-gather, pipelined */
  RM_ALGO_HALVING_DOUBLING = 2, /* Rabenseifner */
  RM_ALGO_BUTTERFLY = 3,        /* recursive doubling, whole vector */
  RM_ALGO_TREE = 4,             /* binomial reduce + broadcast */
  RM_ALGO_HIERARCHICAL = 5,     /* reduce-scatter in each host (shared
                                 * memory), all-reduce across hosts, all-
                                 * gather in each host; the flat ring when
                                 * the job is on one host or hosts differ
                                 * in rank count */
  RM_ALGO_NCCL = 6,             /* device buffers on NCCL (loaded with
                                 * dlopen) under ringmaster's membership;
                                 * host buffers, and where NCCL cannot
                                 * start, on ringmaster's algorithms;
                                 * auto never picks it */
  RM_ALGO_COUNT
} rm_algo_t;

RM_EXTERN const char *rm_algo_name(rm_algo_t a); /* "ring", "hd", ... */
/* Other spellings of an algorithm: XX(alias, canonical name), the one list
 * (used by rm_algo_parse*, and by code that cannot link this library but
 * must map an alias, such as the coordinator's JSON layer). */
#define RM_ALGO_ALIAS_MAP(XX) \
  XX("halving_doubling", "hd") \
  XX("halving-doubling", "hd") \
  XX("hier", "hierarchical")
/* Accepts "auto", "ring", "hd" (also "halving_doubling" and
 * "halving-doubling"), "butterfly", "tree", "hierarchical" (also "hier"),
 * "nccl", in any case. */
RM_EXTERN rm_status_t rm_algo_parse(const char *s, rm_algo_t *out);
/* The same spellings, case-sensitive (what a job spec accepts); *out is
 * written only on RM_OK. rm_algo_name(*out) is the canonical spelling. */
RM_EXTERN rm_status_t rm_algo_parse_exact(const char *s, rm_algo_t *out);

#ifdef __cplusplus
}
#endif

#endif
