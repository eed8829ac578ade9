/* sbuf.c - growable string buffer (see sbuf.h). */
#include "sbuf.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "rm_alloc.h"

void rm__sbuf_init(rm__sbuf_t *b)
{
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

void rm__sbuf_free(rm__sbuf_t *b)
{
  free(b->data);
  rm__sbuf_init(b);
}

static void reserve(rm__sbuf_t *b, size_t extra)
{
  size_t need = b->len + extra + 1;
  size_t cap = b->cap ? b->cap : 256;
  if (need <= b->cap) return;
  while (cap < need) cap *= 2;
  b->data = rm__xrealloc(b->data, cap);
  b->cap = cap;
}

void rm__sbuf_append(rm__sbuf_t *b, const char *s, size_t n)
{
  reserve(b, n);
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void rm__sbuf_puts(rm__sbuf_t *b, const char *s) { rm__sbuf_append(b, s, strlen(s)); }

void rm__sbuf_vprintf(rm__sbuf_t *b, const char *fmt, va_list ap)
{
  va_list ap2;
  int n;

  va_copy(ap2, ap);
  n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n <= 0) return;
  reserve(b, (size_t)n);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void rm__sbuf_printf(rm__sbuf_t *b, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  rm__sbuf_vprintf(b, fmt, ap);
  va_end(ap);
}

char *rm__sbuf_take(rm__sbuf_t *b, size_t *len)
{
  char *s;
  if (b->data == NULL) {
    reserve(b, 0);
    b->data[0] = '\0';
  }
  s = b->data;
  if (len) *len = b->len;
  rm__sbuf_init(b);
  return s;
}
