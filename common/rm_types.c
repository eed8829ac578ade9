/*
 * rm_types.c - dtypes, ops and algorithms in words, and their parsers
 * (include/ringmaster/types.h). Compiled into libringmaster and rm_common.
 *
 * Each name has one canonical spelling (the table below, what *_name
 * returns); an algorithm also has the aliases of RM_ALGO_ALIAS_MAP (types.h). The *_parse
 * functions accept those spellings in any case (the library's environment
 * variables and workload options have always done so); rm_algo_parse_exact
 * accepts them exactly as written here (the coordinator's job specs).
 */
#include <string.h>
#include <strings.h>

#include "ringmaster/types.h"

static const struct {
  const char *name;
  size_t size;
} g_dtypes[RM_DTYPE_COUNT] = {
    [RM_F32] = {"f32", 4}, [RM_F64] = {"f64", 8}, [RM_F16] = {"f16", 2},
    [RM_BF16] = {"bf16", 2}, [RM_I32] = {"i32", 4}, [RM_I64] = {"i64", 8},
    [RM_U8] = {"u8", 1},
};

static const char *const g_ops[RM_OP_COUNT] = {
    [RM_SUM] = "sum", [RM_PROD] = "prod", [RM_MIN] = "min",
    [RM_MAX] = "max", [RM_AVG] = "avg",
};

static const char *const g_algos[RM_ALGO_COUNT] = {
    [RM_ALGO_AUTO] = "auto", [RM_ALGO_RING] = "ring",
    [RM_ALGO_HALVING_DOUBLING] = "hd", [RM_ALGO_BUTTERFLY] = "butterfly",
    [RM_ALGO_TREE] = "tree", [RM_ALGO_HIERARCHICAL] = "hierarchical",
    [RM_ALGO_NCCL] = "nccl",
};

/* Other spellings of an algorithm, beside g_algos (types.h). */
#define RM__ALIAS(alias, canonical) {alias, canonical},
static const struct {
  const char *name, *canonical;
} g_algo_aliases[] = {RM_ALGO_ALIAS_MAP(RM__ALIAS)};
#undef RM__ALIAS

size_t rm_dtype_size(rm_dtype_t dt)
{
  return ((unsigned)dt < RM_DTYPE_COUNT) ? g_dtypes[dt].size : 0;
}

const char *rm_dtype_name(rm_dtype_t dt)
{
  return ((unsigned)dt < RM_DTYPE_COUNT) ? g_dtypes[dt].name : "unknown";
}

const char *rm_op_name(rm_op_t op)
{
  return ((unsigned)op < RM_OP_COUNT) ? g_ops[op] : "unknown";
}

const char *rm_algo_name(rm_algo_t a)
{
  return ((unsigned)a < RM_ALGO_COUNT) ? g_algos[a] : "unknown";
}

rm_status_t rm_dtype_parse(const char *s, rm_dtype_t *out)
{
  if (s == NULL || out == NULL) return RM_ERR_INVALID_ARG;
  for (int i = 0; i < RM_DTYPE_COUNT; i++) {
    if (strcasecmp(s, g_dtypes[i].name) == 0) {
      *out = (rm_dtype_t)i;
      return RM_OK;
    }
  }
  return RM_ERR_INVALID_ARG;
}

rm_status_t rm_op_parse(const char *s, rm_op_t *out)
{
  if (s == NULL || out == NULL) return RM_ERR_INVALID_ARG;
  for (int i = 0; i < RM_OP_COUNT; i++) {
    if (strcasecmp(s, g_ops[i]) == 0) {
      *out = (rm_op_t)i;
      return RM_OK;
    }
  }
  return RM_ERR_INVALID_ARG;
}

static rm_status_t algo_parse(const char *s, rm_algo_t *out,
                              int (*cmp)(const char *, const char *))
{
  if (s == NULL || out == NULL) return RM_ERR_INVALID_ARG;
  for (size_t i = 0; i < sizeof g_algo_aliases / sizeof *g_algo_aliases; i++) {
    if (cmp(s, g_algo_aliases[i].name) == 0) {
      s = g_algo_aliases[i].canonical;
      break;
    }
  }
  for (int i = 0; i < RM_ALGO_COUNT; i++) {
    if (cmp(s, g_algos[i]) == 0) {
      *out = (rm_algo_t)i;
      return RM_OK;
    }
  }
  return RM_ERR_INVALID_ARG;
}

rm_status_t rm_algo_parse(const char *s, rm_algo_t *out)
{
  return algo_parse(s, out, strcasecmp);
}

rm_status_t rm_algo_parse_exact(const char *s, rm_algo_t *out)
{
  return algo_parse(s, out, strcmp);
}
