/* launch_test_util.h - small helpers for the launcher tests. */
#ifndef RM_TEST_LAUNCH_UTIL_H
#define RM_TEST_LAUNCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "launch.h"
#include "rm_testcheck.h" /* CHECK, rm_check_failures, rm_check_exit */

/* A launch spec for job `job_id` of `world` fake workers (worker, extra
 * arguments), token "tok", coordinator 127.0.0.1:7070, logs in dir/sub
 * (a static buffer: one spec at a time). */
void lt_spec_init(rm_launch_spec_t *s, const char *dir, const char *sub,
                  const char *job_id, const char *worker, int world,
                  const char *const *extra);
/* mkdtemp under $TMPDIR or /tmp; static buffer is the caller's (len >= 64). */
void lt_tmpdir(char *buf, size_t len, const char *tag);
/* Write text to path with mode. Exits on failure. */
void lt_write(const char *path, const char *text, int mode);
/* Whole file as a malloc'd NUL-terminated string, or NULL. */
char *lt_read(const char *path);
/* Number of open fds of this process. */
int lt_count_fds(void);
/* rm -rf dir (fork/exec, waits). */
void lt_rmrf(const char *dir);
/* 1 if path's contents contain needle. */
int lt_file_has(const char *path, const char *needle);

#endif
