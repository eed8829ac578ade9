#include "rm_param.h"

#include <errno.h>
#include <stdlib.h>

#include "rm_log.h"

int64_t rm__env_int(const char *name, int64_t def)
{
  const char *s = getenv(name);
  char *end = NULL;
  long long v;

  if (s == NULL || *s == '\0') return def;
  errno = 0;
  v = strtoll(s, &end, 10);
  if (errno != 0 || end == s) goto bad;
  switch (*end) {
  case 'k': case 'K': v *= 1024LL; end++; break;
  case 'm': case 'M': v *= 1024LL * 1024; end++; break;
  case 'g': case 'G': v *= 1024LL * 1024 * 1024; end++; break;
  default: break;
  }
  if (*end != '\0') goto bad;
  return (int64_t)v;
bad:
  RM_WARN("ignoring %s=%s: not an integer; using %lld", name, s, (long long)def);
  return def;
}

const char *rm__env_str(const char *name, const char *def)
{
  const char *s = getenv(name);
  return (s == NULL || *s == '\0') ? def : s;
}
