/*
 * spec_use.h - SPEC USE, the coordinator's half (spec_use.c): what a
 * command job's steps applied, judged against its spec. No protobuf here:
 * rpc/rpc.c hands the ReportStep fields over in this struct.
 */
#ifndef RM_COORD_SPEC_USE_H
#define RM_COORD_SPEC_USE_H

#include <stdint.h>

#include "core/core_int.h"

typedef struct rm__spec_use {
  int known;               /* the worker library filled the fields */
  uint64_t step;           /* the report's step */
  const char *aggregation; /* method of the step's rm_aggregate calls; "" none */
  uint32_t secure_sums;    /* rm_session_secure_allreduce calls */
  uint32_t gated;          /* gated rm_session_allreduce_step calls */
  uint64_t plain_bytes;    /* the program's own float sum/average all-reduces */
  const char *refused;     /* "" or the words of a call the library refused */
} rm__spec_use_t;

/* Judge one ReportStep of member w (under lock). Returns 1 when it failed
 * the job (or u is a refusal, which is not a step): the caller records no
 * step; 0 otherwise (a straggler policy left unused only raises an event). */
int rm__spec_use_step(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      const rm__spec_use_t *u);

#endif
