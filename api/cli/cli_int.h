/*
 * cli_int.h - what cli.c shares with run.c (module-private): the parsed
 * global options and the request helpers.
 */
#ifndef RM_API_CLI_INT_H
#define RM_API_CLI_INT_H

#include <jansson.h>

#include "api.h"
#include "auth.h"
#include "http_client.h"

typedef struct {
  const char *server;
  char token[RM_API_TOKEN_MAX + 1];
  const char *cacert;       /* --cacert / RINGMASTER_CACERT, NULL: system CAs */
  int json;
  int timeout_ms;           /* --timeout: the whole request */
  int connect_timeout_ms;   /* --connect-timeout, 0: --timeout */
  volatile sig_atomic_t *signals; /* Ctrl-C counter that abandons a request, or NULL */
  const char *state;
  const char *limit;
  const char *offset;
  const char *reason;
  const char *image;
  const char *ns;
} cli_t;

/* The request options (token, CA file, deadlines) of c, with timeout_ms
 * for the whole request. */
rm__http_opts_t rm__cli_http_opts(const cli_t *c, int timeout_ms);
/* 0 when c->cacert is unset or readable; else prints why and returns -1. */
int rm__cli_check_cacert(const cli_t *c);
/* c->token from --token / --token-file (token, file: NULL when not given)
 * or the environment, else the read-only token if one is configured; 0,
 * or -1 after printing why. */
int rm__cli_resolve_token(cli_t *c, const char *token, const char *file);
/* One request; on an HTTP error prints the server's error message. Returns
 * the exit code (RM_CLI_EXIT_*) and, on 2xx, the reply in *r (free
 * r->body). */
int rm__cli_call_raw(cli_t *c, const char *method, const char *path, const char *body,
                     rm__http_reply_t *r);
/* rm__cli_call_raw, then the parsed JSON body in *out (new reference). */
int rm__cli_call(cli_t *c, const char *method, const char *path, const char *body,
                 json_t **out);
/* Borrowed string member ("" when absent), integer member (0). */
const char *rm__cli_jstr(json_t *o, const char *k);
long long rm__cli_jint(json_t *o, const char *k);
/* The global options (getopt over argv[0..argc)): 0, 1 after --help/-h
 * (usage printed on stdout: exit 0), -1 on a bad one (exit 2). */
int rm__cli_parse_args(cli_t *c, int argc, char **argv);
int rm__cli_is_id(const char *s);

/* run.c: `ringmaster run ...` and `ringmaster logs ...`; argv[0] is the
 * subcommand. Return the process exit code. */
int rm__cli_run(cli_t *c, int argc, char **argv);
int rm__cli_logs(cli_t *c, int argc, char **argv);

#endif
