/*
 * coord_fixture.h - the in-process coordinator the api unit tests open on a
 * SQLite file (gRPC on a free loopback port). Header-only; needs
 * rm_testcheck.h (a failed open counts as a failed check and returns NULL).
 */
#ifndef RM_TESTS_API_COORD_FIXTURE_H
#define RM_TESTS_API_COORD_FIXTURE_H

#include <stdio.h>

#include "coord.h"
#include "rm_testcheck.h"

static rm_coord_t *open_coord(const char *db)
{
  rm_coord_options_t o;
  rm_coord_t *c = NULL;
  char err[256] = "";
  rm_coord_options_init(&o);
  o.db_path = db;
  o.grpc_addr = "127.0.0.1:0";
  CHECKF(rm_coord_open(&o, &c, err, sizeof err) == RM_OK, "open: %s", err);
  return c;
}

/* Submit job "<prefix>-<i>": 2 workers, launcher none; its id (0 and a
 * failed check if refused). */
static __attribute__((unused)) uint64_t submit_named(rm_coord_t *c, const char *prefix, int i)
{
  rm_job_spec_t spec;
  rm_job_info_t info;
  rm_job_spec_init(&spec);
  snprintf(spec.name, sizeof spec.name, "%s-%d", prefix, i);
  spec.world_size = 2;
  snprintf(spec.launcher, sizeof spec.launcher, "none");
  info.id = 0;
  CHECKF(rm_coord_submit(c, &spec, &info, NULL) == RM_OK, "submit %s-%d", prefix, i);
  return info.id;
}

#endif
