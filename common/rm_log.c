#include "rm_log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int g_level = -1;
static char g_tag[48];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static int level_from_env(void)
{
  const char *s = getenv("RINGMASTER_LOG_LEVEL");
  if (s == NULL || *s == '\0') return RM_LOG_WARN;
  if (strcasecmp(s, "error") == 0) return RM_LOG_ERROR;
  if (strcasecmp(s, "warn") == 0 || strcasecmp(s, "warning") == 0) return RM_LOG_WARN;
  if (strcasecmp(s, "debug") == 0) return RM_LOG_DEBUG;
  return RM_LOG_INFO;
}

int rm__log_level(void)
{
  int l = __atomic_load_n(&g_level, __ATOMIC_RELAXED);
  if (l < 0) {
    l = level_from_env();
    __atomic_store_n(&g_level, l, __ATOMIC_RELAXED);
  }
  return l;
}

void rm__log_set_level(int level) { __atomic_store_n(&g_level, level, __ATOMIC_RELAXED); }

void rm__log_default(int level)
{
  const char *s = getenv("RINGMASTER_LOG_LEVEL");
  if (s == NULL || *s == '\0') rm__log_set_level(level);
}

void rm__log_set_tag(const char *tag)
{
  pthread_mutex_lock(&g_lock);
  snprintf(g_tag, sizeof g_tag, "%s", tag ? tag : "");
  pthread_mutex_unlock(&g_lock);
}

void rm__log(int level, const char *file, int line, const char *fmt, ...)
{
  static const char letters[] = "EWID";
  char msg[1024];
  char stamp[40];
  struct timeval tv;
  struct tm tm;
  const char *base = strrchr(file, '/');
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  gettimeofday(&tv, NULL);
  gmtime_r(&tv.tv_sec, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  pthread_mutex_lock(&g_lock);
  fprintf(stderr, "%s.%03ldZ %c ringmaster[%d]%s%s %s:%d %s\n", stamp,
          (long)(tv.tv_usec / 1000), letters[level & 3], (int)getpid(),
          g_tag[0] ? " " : "", g_tag, base ? base + 1 : file, line, msg);
  pthread_mutex_unlock(&g_lock);
}
