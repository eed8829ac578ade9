/*
 * rm_log.h - leveled logging to stderr, shared by every binary.
 *
 * Level from RINGMASTER_LOG_LEVEL (error|warn|info|debug), read once. Without
 * it: warn, as libringmaster inside a user's program should be quiet (as NCCL
 * is without NCCL_DEBUG: warnings and errors only, no probe lines on every
 * rank's stderr); the daemons (ringmaster serve and its CLI, ringmaster-worker)
 * call rm__log_default(RM_LOG_INFO) first, as their log is their record.
 * Lines look like:
 *   2026-11-29T18:01:02.123Z W ringmaster[4411] tcp.c:210 peer rank 3 lost
 * rm__log_set_tag() sets a short tag ("rank 2", "coord") printed after the pid.
 */
#ifndef RM_COMMON_LOG_H
#define RM_COMMON_LOG_H

#include <stdarg.h>

enum { RM_LOG_ERROR = 0, RM_LOG_WARN = 1, RM_LOG_INFO = 2, RM_LOG_DEBUG = 3 };

int rm__log_level(void);
void rm__log_set_level(int level);
/* the level when RINGMASTER_LOG_LEVEL is unset or empty (a main() calls it) */
void rm__log_default(int level);
void rm__log_set_tag(const char *tag);
void rm__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define RM_LOG(level, ...)                                                    \
  do {                                                                        \
    if ((level) <= rm__log_level())                                           \
      rm__log((level), __FILE__, __LINE__, __VA_ARGS__);                      \
  } while (0)
#define RM_ERROR(...) RM_LOG(RM_LOG_ERROR, __VA_ARGS__)
#define RM_WARN(...) RM_LOG(RM_LOG_WARN, __VA_ARGS__)
#define RM_INFO(...) RM_LOG(RM_LOG_INFO, __VA_ARGS__)
#define RM_DEBUG(...) RM_LOG(RM_LOG_DEBUG, __VA_ARGS__)

#endif
