/* agent.h - ringmaster-worker: options, the built-in workload loop (agent.c)
 * and the supervisor of a command job's program (supervise.c). */
#ifndef RM_AGENT_AGENT_H
#define RM_AGENT_AGENT_H

#include <stdint.h>

#include "ringmaster/ringmaster.h"

typedef struct rm_agent_opts {
  const char *coordinator;  /* HOST:PORT */
  uint64_t job_id;
  const char *token;
  const char *workload;     /* NULL = the job's */
  const char *workload_options; /* NULL = the job's */
  uint64_t steps;           /* 0 = the job's */
  const char *host;         /* NULL = gethostname() */
  const char *data_addr;    /* NULL = "127.0.0.1:0" */
  int rank_hint, world_hint; /* the launch index and world, -1 / 0 none */
  int connect_timeout_ms;   /* give up on an unreachable coordinator */
  int data_timeout_ms;      /* data-plane deadline; 0 = library default */
  const char *tls_ca, *tls_cert, *tls_key;
} rm_agent_opts_t;

/* Exit codes: 0 job succeeded (this worker finished), 1 job failed or
 * cancelled (or, for a command job, the program did not exit 0), 2 usage,
 * 3 coordinator unreachable or refused us. */
int rm__agent_run(const rm_agent_opts_t *o);

/* A session config for these options (strings borrowed from o). */
void rm__agent_session_config(const rm_agent_opts_t *o, rm_session_config_t *cfg);

/* The job's spec through Attach (supervise.c): 0 and *workload filled
 * ("command" or a built-in name), or the exit code to return. */
int rm__agent_attach_workload(const rm_agent_opts_t *o, char *workload,
                              size_t len);
/* Supervise a command job's program until it ends; returns the exit code. */
int rm__agent_supervise(const rm_agent_opts_t *o);

#endif
