#include "rm_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n)
{
  fprintf(stderr, "ringmaster: out of memory allocating %zu bytes\n", n);
  abort();
}

void *rm__xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (p == NULL) oom(n);
  return p;
}

void *rm__xcalloc(size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (p == NULL) oom(n * size);
  return p;
}

void *rm__xrealloc(void *p, size_t n)
{
  void *q = realloc(p, n ? n : 1);
  if (q == NULL) oom(n);
  return q;
}

char *rm__xstrdup(const char *s)
{
  size_t n = strlen(s) + 1;
  char *p = rm__xmalloc(n);
  memcpy(p, s, n);
  return p;
}
