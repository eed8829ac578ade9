/*
 * jobspec.h - strict JSON layer for the job spec sent to POST /api/v1/jobs.
 *
 * The body is one JSON object whose keys mirror rm_job_spec_t (coord.h):
 *
 *   key                    JSON type          notes
 *   name                   string, required   1..63 chars
 *   world_size             integer            0..65536 (0 with min/max = elastic)
 *   min_workers            integer            0..65536
 *   max_workers            integer            0..65536
 *   algorithm              string             auto|ring|hd|butterfly|tree
 *   dtype                  string             f32|f64|f16|bf16|i32|i64|u8
 *   workload               string             allreduce|train|synthetic|command
 *   workload_options       object or string   {"count": 1048576} or
 *                                             "count=1048576"; object values
 *                                             string|number|bool, keys
 *                                             [A-Za-z0-9_]
 *   steps                  integer            0..2^53 (0 = default)
 *   launcher               string             local|slurm|k8s|none
 *   heartbeat_timeout_ms   integer            0..2^31-1
 *   barrier_timeout_ms     integer            0..2^31-1
 *   on_failure             string             fail|shrink|replace
 *   max_restarts           integer            0..2^31-1
 *   straggler_policy       string             none|backup|deadline|coded
 *   backup_workers         integer            0..2^31-1
 *   checkpoint_every       integer            0..2^53
 *   command                array of strings   workload command: argv, no
 *                                             shell; <= 64, 4096 bytes
 *   env                    object of strings  workload command: {"K": "V"};
 *                                             <= 64, 4096 bytes as K=V
 *   workdir                string             workload command; <= 255
 *   aggregation            object             issue 12, every member optional:
 *     .method              string             mean|median|trimmed_mean|krum|
 *                                             multi_krum|bulyan|centered_clip
 *     .f                   integer            0..65536 tolerated Byzantine
 *     .m                   integer            0..65536 multi_krum selections
 *     .clip_norm           number             per-worker L2 clip, 0 = off
 *     .tau                 number             centered_clip radius
 *     .iterations          integer            0..10^6 centered_clip rounds
 *                                             (errors name "aggregation.f")
 *
 * This layer refuses, naming the field: malformed JSON (field ""), a body
 * that is not an object, duplicate keys, unknown keys, wrong JSON types,
 * strings that do not fit, negative or out-of-range integers, reals where an
 * integer is required, NUL bytes. What the values MEAN (known algorithm,
 * min <= max, ...) is checked afterwards by rm_job_spec_validate() in the
 * coordinator, which also names the field, so the rules live in one place.
 */
#ifndef RM_API_JOBSPEC_H
#define RM_API_JOBSPEC_H

#include <stddef.h>

#include "coord.h"

/* Why a spec was refused. code is one of invalid_json, unknown_field,
 * invalid_type, invalid_value, missing_field. */
typedef struct rm_api_spec_error {
  char code[24];
  char field[64];
  char message[256];
} rm_api_spec_error_t;

/* Parse `len` bytes (need not be NUL-terminated) into *out, which is first
 * set with rm_job_spec_init-style zero defaults by the caller. Returns 0, or
 * -1 and fills *err (*out is then partially written; discard it). */
int rm__jobspec_parse(const char *body, size_t len, rm_job_spec_t *out,
                      rm_api_spec_error_t *err);

#endif
