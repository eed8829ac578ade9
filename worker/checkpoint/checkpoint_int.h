/* checkpoint_int.h - private to checkpoint.c and checkpoint_dir.c. */
#ifndef RM_WORKER_CHECKPOINT_CHECKPOINT_INT_H
#define RM_WORKER_CHECKPOINT_CHECKPOINT_INT_H

#include <stddef.h>

#include "rm_log.h"

/* snprintf into err when err != NULL && n > 0 */
void rm__ckpt_seterr(char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* fsync a directory (makes renames and unlinks in it durable); 0 or -1 */
int rm__ckpt_fsync_dir(const char *dir);

#endif
