/*
 * coord.c - the coordinator module's composition: rm_coord_open wires the
 * layers (store/ opens and migrates the file, core/ loads and resumes the
 * active jobs, rpc/ starts the gRPC server) and rm_coord_close takes them
 * down in reverse; options, launcher registration.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core_int.h"
#include "rpc/rpc_int.h"
#include "rm_alloc.h"

void rm_coord_options_init(rm_coord_options_t *o)
{
  memset(o, 0, sizeof *o);
  o->db_path = "./ringmaster.db";
  o->grpc_addr = "127.0.0.1:7070";
  o->heartbeat_timeout_ms = 10000;
  o->barrier_timeout_ms = 60000;
  o->max_message_bytes = 4 << 20;
  o->step_window = 4096;
}

void rm_coord_free(void *p) { free(p); }

static char *dup_or_null(const char *s) { return s ? rm__xstrdup(s) : NULL; }

/* ---- open / close ---- */
rm_status_t rm_coord_open(const rm_coord_options_t *o, rm_coord_t **out,
                          char *err, size_t errlen)
{
  rm_coord_t *c = rm__xcalloc(1, sizeof *c);
  rm_status_t st;
  c->opt = *o;
  c->opt.db_path = rm__xstrdup(o->db_path ? o->db_path : "./ringmaster.db");
  c->opt.grpc_addr = rm__xstrdup(o->grpc_addr ? o->grpc_addr : "127.0.0.1:7070");
  c->opt.tls_cert = dup_or_null(o->tls_cert);
  c->opt.tls_key = dup_or_null(o->tls_key);
  c->opt.tls_ca = dup_or_null(o->tls_ca);
  c->opt.admin_token = dup_or_null(o->admin_token);
  c->opt.read_token = dup_or_null(o->read_token);
  if (c->opt.heartbeat_timeout_ms <= 0) c->opt.heartbeat_timeout_ms = 10000;
  if (c->opt.barrier_timeout_ms <= 0) c->opt.barrier_timeout_ms = 60000;
  if (c->opt.max_message_bytes <= 0) c->opt.max_message_bytes = 4 << 20;
  if (c->opt.step_window <= 0) c->opt.step_window = 4096;
  c->answer = &rm__rpc_answer_ops; /* the core answers through rpc/ */
  c->rpc = rm__rpc_open();         /* and rpc/ keeps its own state there */
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->sub_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->ev_cond, &ca);
  pthread_condattr_destroy(&ca);
  st = rm__store_open(c->opt.db_path, &c->store, err, errlen);
  if (st != RM_OK) goto fail;
  rm__lock(c);
  c->last_seq = rm__store_last_seq(c->store);
  rm__job_load_active(c);
  rm__commit(c);
  st = rm__server_start(c, err, errlen);
  if (st != RM_OK) goto fail;
  *out = c;
  return RM_OK;
fail:
  rm_coord_close(c);
  return st;
}

const char *rm_coord_grpc_address(const rm_coord_t *c) { return c->grpc_addr; }

void rm_coord_close(rm_coord_t *c)
{
  if (!c) return;
  rm__lock(c);
  c->closing = 1;
  pthread_cond_broadcast(&c->ev_cond);
  rm__commit(c);
  rm__server_stop(c);
  rm__lock(c);
  for (size_t i = 0; i < c->njobs; i++) {
    rm__job_t *j = c->jobs[i];
    for (size_t k = 0; k < j->nw; k++) rm__store_step_summary(c->store, j, &j->w[k]);
  }
  rm__commit(c);
  for (size_t i = 0; i < c->njobs; i++) rm__job_free(c->jobs[i]);
  free(c->jobs);
  rm__after_commit_free(c);
  rm__rpc_close(c->rpc);
  rm__store_close(c->store);
  free((void *)c->opt.db_path);
  free((void *)c->opt.grpc_addr);
  free((void *)c->opt.tls_cert);
  free((void *)c->opt.tls_key);
  free((void *)c->opt.tls_ca);
  free((void *)c->opt.admin_token);
  free((void *)c->opt.read_token);
  pthread_cond_destroy(&c->ev_cond);
  pthread_mutex_destroy(&c->sub_mu);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* ---- launchers ---- */
rm_status_t rm_coord_register_launcher(rm_coord_t *c,
                                       const rm_coord_launcher_t *l)
{
  rm_status_t st = RM_ERR_INVALID_ARG;
  rm__lock(c);
  if (l && l->name && l->start && c->nlaunchers < 8) {
    c->launchers[c->nlaunchers++] = *l;
    st = RM_OK;
  }
  rm__commit(c);
  return st;
}
