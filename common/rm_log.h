/*
 * rm_log.h - leveled logging to stderr, shared by every binary.
 *
 * Level from RINGMASTER_LOG_LEVEL (error|warn|info|debug, default info), read
 * once. Lines look like:
 *   2026-11-29T18:01:02.123Z W ringmaster[4411] tcp.c:210 peer rank 3 lost
 * rm__log_set_tag() sets a short tag ("rank 2", "coord") printed after the pid.
 */
#ifndef RM_COMMON_LOG_H
#define RM_COMMON_LOG_H

#include <stdarg.h>

enum { RM_LOG_ERROR = 0, RM_LOG_WARN = 1, RM_LOG_INFO = 2, RM_LOG_DEBUG = 3 };

int rm__log_level(void);
void rm__log_set_level(int level);
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
