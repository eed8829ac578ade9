/*
 * rpc_conv.c - conversions between protobuf-c messages and coord.h structs.
 * Strings in the protobuf structs point INTO the C structs: pack before the
 * C struct goes away (rm__reply packs at once). The repeated fields command
 * and env are heap tables of pointers into the packed lists: free them with
 * rm__pb_spec_free() after the pack.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc_int.h"
#include "rm_alloc.h"

/* A new table of pointers into a packed list; NULL when empty. */
static char **list_ptrs(char *buf, int count, int max, size_t *n)
{
  char *p = buf, **out;
  *n = count <= 0 ? 0 : (size_t)(count < max ? count : max);
  if (!*n) return NULL;
  out = rm__xcalloc(*n, sizeof *out);
  for (size_t i = 0; i < *n; i++, p = (char *)rm_job_spec_next(p)) out[i] = p;
  return out;
}

void rm__pb_spec_free(Ringmaster__V1__JobSpec *o)
{
  free(o->command);
  free(o->env);
  o->command = o->env = NULL;
  o->n_command = o->n_env = 0;
}

/* The env entries masked ("KEY=***"): one block holding the pointer array
 * and the strings, so rm__pb_spec_free's free(o->env) releases both. */
static char **env_masked(const rm_job_spec_t *s, size_t *n)
{
  char buf[RM_COORD_ENV_BYTES], **out;
  int count = rm_job_spec_env_mask(s->env, s->env_count, buf, sizeof buf);
  long len = rm_job_spec_packed_len(buf, sizeof buf, count);
  char *p;
  *n = (size_t)count;
  if (count <= 0 || len <= 0) {
    *n = 0;
    return NULL;
  }
  out = rm__xcalloc(1, (size_t)count * sizeof *out + (size_t)len);
  p = (char *)(out + count);
  memcpy(p, buf, (size_t)len);
  for (int i = 0; i < count; i++, p = (char *)rm_job_spec_next(p)) out[i] = p;
  return out;
}

void rm__pb_spec_from_secret(Ringmaster__V1__JobSpec *o, rm_job_spec_t *s)
{
  rm__pb_spec_from(o, s);
  free(o->env);
  o->env = list_ptrs(s->env, s->env_count, RM_COORD_ENV_MAX, &o->n_env);
}

void rm__pb_spec_from(Ringmaster__V1__JobSpec *o, rm_job_spec_t *s)
{
  ringmaster__v1__job_spec__init(o);
  o->name = s->name;
  o->world_size = (uint32_t)s->world_size;
  o->min_workers = (uint32_t)s->min_workers;
  o->max_workers = (uint32_t)s->max_workers;
  o->algorithm = s->algorithm;
  o->dtype = s->dtype;
  o->workload = s->workload;
  o->workload_options = s->workload_options;
  o->steps = s->steps;
  o->launcher = s->launcher;
  o->heartbeat_timeout_ms = (uint32_t)s->heartbeat_timeout_ms;
  o->barrier_timeout_ms = (uint32_t)s->barrier_timeout_ms;
  o->on_failure = s->on_failure;
  o->max_restarts = (uint32_t)s->max_restarts;
  o->straggler_policy = s->straggler_policy;
  o->backup_workers = (uint32_t)s->backup_workers;
  o->checkpoint_every = s->checkpoint_every;
  o->command = list_ptrs(s->command, s->command_argc, RM_COORD_ARGV_MAX,
                         &o->n_command);
  o->env = env_masked(s, &o->n_env);
  o->workdir = s->workdir;
  o->aggregation = s->aggregation;
  o->aggregation_f = (uint32_t)s->aggregation_f;
  o->aggregation_m = (uint32_t)s->aggregation_m;
  o->clip_norm = s->clip_norm;
  o->aggregation_tau = s->aggregation_tau;
  o->aggregation_iterations = (uint32_t)s->aggregation_iterations;
  o->deterministic = s->deterministic != 0;
  o->max_staleness = (uint32_t)s->max_staleness;
  o->secagg_bits = (uint32_t)s->secagg_bits;
  o->secagg_clip = s->secagg_clip;
  o->secagg_scale = s->secagg_scale;
  o->secagg_threshold = (uint32_t)s->secagg_threshold;
  o->secagg_neighbours = s->secagg_neighbours;
}

void rm__pb_job_from(Ringmaster__V1__Job *o, Ringmaster__V1__JobSpec *spec,
                     rm_job_info_t *in, int with_token)
{
  ringmaster__v1__job__init(o);
  rm__pb_spec_from(spec, &in->spec);
  o->id = in->id;
  o->spec = spec;
  o->state = (Ringmaster__V1__JobState)in->state;
  o->reason = in->reason;
  o->generation = in->generation;
  o->world = (uint32_t)in->world;
  o->step = in->step;
  o->created_ms = in->created_ms;
  o->finished_ms = in->finished_ms;
  o->token = with_token ? in->token : (char *)"";
}

/* Copy a protobuf string into a fixed array; -1 when it does not fit. */
int rm__pb_str(char *dst, size_t len, const char *src)
{
  size_t n = src ? strlen(src) : 0;
  if (n >= len) return -1;
  memcpy(dst, src ? src : "", n + 1);
  return 0;
}

/* A value no int holds becomes INT_MIN, which every range of
 * rm_job_spec_validate refuses in words that state the range. */
static int u32_to_int(uint32_t v, int *out)
{
  *out = v > 0x7fffffff ? INT_MIN : (int)v;
  return 0;
}

/* Returns the name of the offending field, or NULL. */
const char *rm__pb_spec_to(rm_job_spec_t *s, const Ringmaster__V1__JobSpec *in)
{
  rm_job_spec_init(s);
  s->workload[0] = s->launcher[0] = s->on_failure[0] = 0;
  s->straggler_policy[0] = s->algorithm[0] = s->dtype[0] = 0;
  s->aggregation[0] = 0;
  s->clip_norm = in->clip_norm;
  s->aggregation_tau = in->aggregation_tau;
  s->steps = in->steps;
  s->checkpoint_every = in->checkpoint_every;
  s->deterministic = in->deterministic;
  s->secagg_clip = in->secagg_clip;
  s->secagg_scale = in->secagg_scale;
#define STR(f) if (rm__pb_str(s->f, sizeof s->f, in->f)) return #f
#define INT(f) if (u32_to_int(in->f, &s->f)) return #f
  rm_algo_t algo;
  if (in->algorithm && rm_algo_parse_exact(in->algorithm, &algo) == RM_OK)
    snprintf(s->algorithm, sizeof s->algorithm, "%s", rm_algo_name(algo)); /* alias: canonical */
  else
    STR(algorithm);
  STR(name); STR(dtype); STR(workload); STR(workload_options);
  STR(launcher); STR(on_failure); STR(straggler_policy);
  INT(world_size); INT(min_workers); INT(max_workers);
  INT(heartbeat_timeout_ms); INT(barrier_timeout_ms); INT(max_restarts);
  INT(backup_workers);
  STR(workdir); STR(aggregation);
  INT(aggregation_f); INT(aggregation_m); INT(aggregation_iterations);
  INT(max_staleness);
  INT(secagg_bits); INT(secagg_threshold); STR(secagg_neighbours);
#undef STR
#undef INT
  if (in->n_command > RM_COORD_ARGV_MAX) return "command";
  for (size_t i = 0; i < in->n_command; i++)
    if (rm_job_spec_pack(s->command, sizeof s->command, &s->command_argc,
                         in->command[i], strlen(in->command[i])))
      return "command";
  if (in->n_env > RM_COORD_ENV_MAX) return "env";
  for (size_t i = 0; i < in->n_env; i++)
    if (rm_job_spec_pack(s->env, sizeof s->env, &s->env_count, in->env[i],
                         strlen(in->env[i])))
      return "env";
  return NULL;
}
