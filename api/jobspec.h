/*
 * jobspec.h - strict JSON layer for the job spec sent to POST /api/v1/jobs.
 *
 * The body is one JSON object whose keys mirror rm_job_spec_t (coord.h):
 *
 *   key                    JSON type          accepted values
 *   name                   string, required   [A-Za-z0-9._-], 1..63 chars
 *   world_size             integer            1..65536, or 0 (= omitted)
 *                                             with min/max_workers: elastic
 *   min_workers            integer            0..65536
 *   max_workers            integer            0..65536, >= min_workers
 *   algorithm              name               auto|ring|hd|butterfly|tree|hierarchical|nccl;
 *                                             aliases halving_doubling,
 *                                             halving-doubling (stored "hd")
 *   dtype                  name               f32|f64|f16|bf16|i32|i64|u8
 *   workload               name               allreduce|train|synthetic|
 *                                             command
 *   workload_options       object or string   {"count": 1048576} or
 *                                             "count=1048576"; object values
 *                                             string|number|bool, keys
 *                                             [A-Za-z0-9_]
 *   steps                  integer            0..2^53 (0 = default, 100)
 *   launcher               name               local|slurm|k8s|none
 *   heartbeat_timeout_ms   integer            0 (default) or 100..3600000
 *   barrier_timeout_ms     integer            0 (default) or 100..86400000
 *   on_failure             name               fail|shrink|replace
 *   max_restarts           integer            0..2^31-1
 *   straggler_policy       name               none|backup|deadline|coded|
 *                                             stale|auto (which workload
 *                                             may use which: core/spec.c)
 *   backup_workers         integer            0..2^31-1 (and what the
 *                                             policy needs)
 *   checkpoint_every       integer            0..2^53 (0 = never)
 *   command                array of strings   workload command: argv, no
 *                                             shell; <= 64, 4096 bytes
 *   env                    object of strings  workload command: {"K": "V"};
 *                                             <= 64, 4096 bytes as K=V
 *   workdir                string             workload command; <= 255
 *   aggregation            object             every member optional:
 *     .method              name               mean|median|trimmed_mean|krum|
 *                                             multi_krum|bulyan|centered_clip
 *     .f                   integer            0..65536 tolerated Byzantine
 *     .m                   integer            0..65536 multi_krum selections
 *     .clip_norm           number             per-worker L2 clip, 0 = off
 *     .tau                 number             centered_clip radius
 *     .iterations          integer            0..10^6 centered_clip rounds
 *                                             (errors name "aggregation.f")
 *   deterministic          boolean            bitwise reproducible
 *                                             (coord.h says what it promises)
 *   max_staleness          integer            0..64; 1..64 with, and only
 *                                             with, straggler_policy stale
 *   secure_aggregation     object             present = on, every
 *                                             member optional:
 *     .bits                integer            32 (default) or 64
 *     .clip                number             > 0; 0/omitted = clip_norm
 *                                             when > 0, else 1
 *     .scale               number             >= 0; 0 = the worker's
 *                                             largest safe power of two
 *     .threshold           integer            2..world; 0/omitted =
 *                                             max(2, n/2 + 1)
 *     .neighbours          name               all (default) | log
 *                                             (rules: core/spec.c)
 *
 * The rules (api/openapi.json states the same, and
 * tests/api/test_strict_spec.py holds the server to the document):
 *   - A name field takes exactly the spellings above, case-sensitive
 *     ("RING", "F32" are refused); an alias is accepted and stored as the
 *     canonical name, so a job's spec never shows an alias.
 *   - An omitted field takes the default; an empty string is not a value:
 *     "" in a name field is a 400 naming the field.
 *   - An integer outside its range, including one beyond int64 or uint64,
 *     is a 400 invalid_value naming the field and the range above.
 *   - Strings, keys and values must not contain NUL (\u0000).
 *   - Every refusal is {"code", "field", "message"}; messages are ours,
 *     never the JSON library's flag names.
 *
 * This layer refuses, naming the field: unknown keys, wrong JSON types,
 * strings that do not fit, empty names, reals where an integer is
 * required. Malformed text has code invalid_json and field "" (a body that
 * is not an object: invalid_type, field ""): syntax, invalid UTF-8, a
 * duplicate key and a NUL in a string, whose messages name the key or the
 * field. Which names exist and every
 * integer range are checked afterwards by rm_job_spec_validate() in the
 * coordinator (the gRPC Jobs.SubmitJob path goes through it too), which
 * also names the field, so those rules live in one place (spec.c).
 */
#ifndef RM_API_JOBSPEC_H
#define RM_API_JOBSPEC_H

#include <stddef.h>

#include "coord.h"

/* Why a spec was refused. code is one of invalid_json, unknown_field,
 * invalid_type, invalid_value, missing_field. field is the member as the
 * client sent it, whole ("aggregation.method"; "" for the body as a whole;
 * a name is bounded only by the body's own limit), so a client can match
 * it; owned, freed by rm__jobspec_error_free. */
typedef struct rm_api_spec_error {
  char code[24];
  char *field;
  char message[256];
} rm_api_spec_error_t;

/* Parse `len` bytes (need not be NUL-terminated) into *out, which the
 * caller first sets with rm_job_spec_init. Returns 0 (then pass *out to
 * rm_coord_submit, whose rm_job_spec_validate judges the values: an
 * integer the C field cannot hold is stored as INT_MIN / UINT64_MAX for it
 * to refuse), or -1 and fills *err (*out is then partially written;
 * discard it). Either way, free *err with rm__jobspec_error_free. */
int rm__jobspec_parse(const char *body, size_t len, rm_job_spec_t *out,
                      rm_api_spec_error_t *err);

/* Frees what a refusal holds (err->field); safe after a success too. */
void rm__jobspec_error_free(rm_api_spec_error_t *err);

#endif
