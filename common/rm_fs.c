/* rm_fs.c - file-system helpers (see rm_fs.h). */
#include "rm_fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int rm__mkdir_p(const char *path, char *err, size_t errlen)
{
  char buf[4096];
  struct stat sb;
  if (!path || !*path || snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
    snprintf(err, errlen, "folder path empty or longer than %zu bytes", sizeof buf - 1);
    return -1;
  }
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
      snprintf(err, errlen, "mkdir %s: %s", buf, strerror(errno));
      return -1;
    }
    if (c == '\0' || (c == '/' && p[1] == '\0')) break;
    *p = c;
  }
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    snprintf(err, errlen, "%s exists and is not a folder", path);
    return -1;
  }
  return 0;
}
