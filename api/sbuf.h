/*
 * sbuf.h - a growable NUL-terminated string buffer for building HTTP bodies.
 *
 * The coordinator daemon may abort on out-of-memory (conventions 6 in docs/architecture.md), so appends
 * use rm__xrealloc and never fail. rm__sbuf_take() hands the heap string to
 * the caller (who frees it) and leaves the buffer empty.
 */
#ifndef RM_API_SBUF_H
#define RM_API_SBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
  char *data; /* NUL-terminated when cap > 0 */
  size_t len;
  size_t cap;
} rm__sbuf_t;

void rm__sbuf_init(rm__sbuf_t *b);
void rm__sbuf_free(rm__sbuf_t *b);
void rm__sbuf_append(rm__sbuf_t *b, const char *s, size_t n);
void rm__sbuf_puts(rm__sbuf_t *b, const char *s);
void rm__sbuf_printf(rm__sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rm__sbuf_vprintf(rm__sbuf_t *b, const char *fmt, va_list ap);
/* Returns the heap string (never NULL; "" for an empty buffer). */
char *rm__sbuf_take(rm__sbuf_t *b, size_t *len /* OUT, may be NULL */);

#endif
