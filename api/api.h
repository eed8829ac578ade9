/*
 * api.h - the REST API, /metrics, server-sent events, dashboard and CLI
 * (module tier). Used by serve/main.c; calls only coord.h (what it needs of
 * the launchers comes in as function pointers in rm_api_options_t).
 *
 *   rm_api_options_init(&o); o.listen = "127.0.0.1:8080";
 *   rm_api_start(&o, coord, &api, err, sizeof err);   serves until stop
 *   rm_api_address(api)                               bound "host:port"
 *   rm_api_stop(api);                                 before rm_coord_close
 *
 * The CLI (`ringmaster submit|jobs|job|cancel|k8s-manifest`) is a REST client; its exit
 * codes are RM_CLI_EXIT_* (also in `ringmaster help`).
 */
#ifndef RM_API_API_H
#define RM_API_API_H

#include <stddef.h>
#include <stdio.h>

#include "coord.h"

typedef struct rm_api rm_api_t;

/* What serve/ hands the API of the launchers (rm_launch_coord_log_location,
 * rm_launch_k8s_manifest): where a worker's log file is (folder and file
 * name; 0 ok), and the k8s manifests of a job. */
typedef int (*rm_api_log_location_fn)(void *ctx, uint64_t job_id, int index, char *dir,
                                      size_t dirlen, char *file, size_t filelen);
typedef rm_status_t (*rm_api_k8s_render_fn)(const rm_job_info_t *job,
                                            const char *coord_addr, const char *image,
                                            const char *ns, FILE *out, char *err,
                                            size_t errlen);

typedef struct rm_api_options {
  const char *listen;     /* "host:port", port 0 = free port; default "127.0.0.1:8080" */
  const char *token;      /* --api-token; NULL = see auth.h for the fallbacks */
  const char *token_file; /* --api-token-file */
  /* Reads (GET under /api/v1/ but openapi.json, the event stream) need the
   * API token or this read-only token (docs/security.md); NULL/"" = none,
   * only the API token reads. public_reads = anyone reads (a lab).
   * metrics_auth = /metrics needs a token too (else open; it holds counts
   * only). */
  const char *read_token;
  int public_reads;
  int metrics_auth;
  size_t max_body;        /* request body limit, bytes; 0 = 1 MiB */
  int sse_keepalive_ms;   /* 0 = RINGMASTER_SSE_KEEPALIVE_MS or 15000 */
  int tick_ms;            /* progress push period; 0 = RINGMASTER_API_TICK_MS or 1000 */
  const char *chartjs_path; /* NULL = RINGMASTER_CHARTJS or Debian libjs-chart.js path */
  /* HTTPS: both PEM file paths set = TLS on the REST port (libmicrohttpd
   * with GnuTLS); both NULL = plain HTTP. */
  const char *tls_cert;
  const char *tls_key;
  /* GET .../workers/{index}/log: where the launchers write the log of job
   * id's worker with launch index `index`, as a folder and a file name in
   * it (the API opens both without following links); 0 ok. The composition
   * root (serve/) wires the launchers' own function
   * (rm_launch_coord_log_location) with its ctx. NULL = the endpoint answers
   * 404 (no logs here). */
  rm_api_log_location_fn log_location;
  void *log_ctx;
  /* GET /api/v1/jobs/{id}/k8s-manifest: the k8s launcher's renderer (serve
   * wires rm_launch_k8s_manifest); NULL = the endpoint answers 404. */
  rm_api_k8s_render_fn k8s_render;
  /* For it (serve --advertise, --k8s-image): the address workers dial (NULL
   * = the coordinator's bound gRPC address) and the default image and
   * namespace (NULL = the renderer's). Copied. */
  const char *advertise_addr;
  const char *k8s_image;
  const char *k8s_namespace;
} rm_api_options_t;

void rm_api_options_init(rm_api_options_t *o);
/* Start serving on o->listen. OUT: *out on success; err says why not. */
rm_status_t rm_api_start(const rm_api_options_t *o, rm_coord_t *coord, rm_api_t **out,
                         char *err, size_t errlen);
/* "host:port" really bound. Borrowed, valid until stop. */
const char *rm_api_address(const rm_api_t *api);
/* Ends SSE streams, stops the HTTP server and joins its threads. NULL ok. */
void rm_api_stop(rm_api_t *api);

/* ---- CLI ---- */
enum {
  RM_CLI_EXIT_OK = 0,
  RM_CLI_EXIT_SERVER = 1,      /* the server answered an error (4xx/5xx other than below) */
  RM_CLI_EXIT_USAGE = 2,       /* bad command line or unreadable input file */
  RM_CLI_EXIT_NOT_FOUND = 3,   /* 404: no such job */
  RM_CLI_EXIT_UNAUTHORIZED = 4,/* 401: missing or wrong token */
  RM_CLI_EXIT_UNREACHABLE = 5, /* could not connect / no answer within the deadline */
  RM_CLI_EXIT_INVALID = 6      /* 400/409: the server refused the request (bad spec, ...) */
};

/* 1 when argv[1] is a CLI subcommand (submit, jobs, job, cancel, k8s-manifest). */
int rm_cli_is_command(const char *cmd);
/* Run the CLI; returns the process exit code. */
int rm_cli_main(int argc, char **argv);
/* Usage text of the CLI subcommands (for `ringmaster help`). */
const char *rm_cli_usage(void);

#endif
