/*
 * launch_int.h - private to coordinator/launch/: the handle base and the
 * helpers the launchers share (running a command with a deadline, quoting).
 */
#ifndef RM_COORDINATOR_LAUNCH_INT_H
#define RM_COORDINATOR_LAUNCH_INT_H

#include <stddef.h>

#include "launch.h"

/* Every launcher's handle starts with this (C-style inheritance). */
struct rm__launch {
  const rm__launcher_ops_t *ops;
};

#define RM_LAUNCH_DEFAULT_GRACE_MS 10000
#define RM_LAUNCH_DEFAULT_CMD_TIMEOUT_MS 30000
#define RM_LAUNCH_DEFAULT_POLL_MS 2000

/* snprintf into err when err is not NULL; returns st, so one line can
 * report and fail: `return rm__launch_err(err, len, RM_ERR_X, "...")`. */
rm_status_t rm__launch_err(char *err, size_t errlen, rm_status_t st,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* mkdir -p with mode for the folders it creates. */
rm_status_t rm__launch_mkdir_p(const char *path, char *err, size_t errlen);

/* Result of rm__launch_run(). */
typedef struct {
  int exited;      /* 1 if it exited normally */
  int exit_code;
  int term_signal;
  char out[4096];  /* stdout, NUL-terminated, truncated if longer */
  char errout[4096]; /* stderr, same */
} rm__launch_cmd_t;

/* Run argv[0] (PATH lookup) with stdin from /dev/null, capture stdout and
 * stderr, wait at most timeout_ms (then SIGKILL, reap, RM_ERR_TIMEOUT).
 * RM_ERR_NOT_FOUND when the program cannot be executed. RM_OK means it ran
 * to the end: check res->exited/exit_code. */
rm_status_t rm__launch_run(const char *const *argv, int timeout_ms,
                           rm__launch_cmd_t *res, char *err, size_t errlen);

/* Write s single-quoted for POSIX sh ('it'\''s'). */
void rm__launch_shquote(FILE *f, const char *s);
/* Trim trailing whitespace in place; returns s. */
char *rm__launch_rtrim(char *s);

/* NULL-terminated worker argv; strings borrowed from spec/worker; free the
 * array with free(). Aborts on out-of-memory (coordinator policy). */
char **rm__launch_worker_argv(const rm_launch_spec_t *spec, const char *worker);

#endif
