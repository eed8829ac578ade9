/* agent.h - ringmaster-worker: options and the join/run/leave loop. */
#ifndef RM_AGENT_AGENT_H
#define RM_AGENT_AGENT_H

#include <stdint.h>

typedef struct rm_agent_opts {
  const char *coordinator;  /* HOST:PORT */
  uint64_t job_id;
  const char *token;
  const char *workload;     /* NULL = the job's */
  const char *workload_options; /* NULL = the job's */
  uint64_t steps;           /* 0 = the job's */
  const char *host;         /* NULL = gethostname() */
  const char *data_addr;    /* NULL = "127.0.0.1:0" */
  int rank_hint, world_hint;
  int connect_timeout_ms;   /* give up on an unreachable coordinator */
  int data_timeout_ms;      /* data-plane deadline; 0 = library default */
  const char *tls_ca, *tls_cert, *tls_key;
} rm_agent_opts_t;

/* Exit codes: 0 job succeeded (this worker finished), 1 job failed or
 * cancelled, 2 usage, 3 coordinator unreachable or refused us. */
int rm__agent_run(const rm_agent_opts_t *o);

#endif
