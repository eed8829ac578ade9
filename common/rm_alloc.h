/*
 * rm_alloc.h - allocation policy per binary (conventions 6 in docs/architecture.md).
 *
 * The worker library lives inside someone's training process: it uses plain
 * malloc/calloc and returns RM_ERR_NOMEM on failure. The coordinator daemon
 * may abort on out-of-memory: it uses rm__xmalloc & co, which log and abort.
 */
#ifndef RM_COMMON_ALLOC_H
#define RM_COMMON_ALLOC_H

#include <stddef.h>

void *rm__xmalloc(size_t n);
void *rm__xcalloc(size_t n, size_t size);
void *rm__xrealloc(void *p, size_t n);
char *rm__xstrdup(const char *s);

#endif
