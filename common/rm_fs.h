/* rm_fs.h - file-system helpers shared by the coordinator and the workers. */
#ifndef RM_COMMON_RM_FS_H
#define RM_COMMON_RM_FS_H

#include <stddef.h>

/* mkdir -p: creates `path` and every missing parent (mode 0755 before the
 * umask); an existing folder is fine. Returns 0, or -1 with a sentence in
 * err ("mkdir /a/b: Not a directory") naming the part that failed. */
int rm__mkdir_p(const char *path, char *err, size_t errlen);

#endif
