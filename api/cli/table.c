/* table.c - plain-text tables (see table.h). */
#include "table.h"

#include <stdlib.h>
#include <string.h>

#include "rm_alloc.h"

struct rm__table {
  int ncols;
  size_t nrows, cap;
  char **cells; /* (nrows + 1) * ncols, row 0 = headers */
  int *right;
};

rm__table_t *rm__table_new(int ncols, const char *const *headers)
{
  rm__table_t *t = rm__xcalloc(1, sizeof *t);
  t->ncols = ncols;
  t->right = rm__xcalloc((size_t)ncols, sizeof *t->right);
  t->cap = 16;
  t->cells = rm__xcalloc(t->cap * (size_t)ncols, sizeof *t->cells);
  for (int c = 0; c < ncols; c++) {
    t->right[c] = headers[c][0] == '>';
    t->cells[c] = rm__xstrdup(headers[c] + t->right[c]);
  }
  t->nrows = 1;
  return t;
}

void rm__table_row(rm__table_t *t, const char *const *cells)
{
  if (t->nrows == t->cap) {
    t->cap *= 2;
    t->cells = rm__xrealloc(t->cells, t->cap * (size_t)t->ncols * sizeof *t->cells);
  }
  for (int c = 0; c < t->ncols; c++)
    t->cells[t->nrows * (size_t)t->ncols + (size_t)c] = rm__xstrdup(cells[c] ? cells[c] : "");
  t->nrows++;
}

void rm__table_print(const rm__table_t *t, FILE *f)
{
  size_t *w = rm__xcalloc((size_t)t->ncols, sizeof *w);
  for (size_t r = 0; r < t->nrows; r++)
    for (int c = 0; c < t->ncols; c++) {
      size_t n = strlen(t->cells[r * (size_t)t->ncols + (size_t)c]);
      if (n > w[c]) w[c] = n;
    }
  for (size_t r = 0; r < t->nrows; r++) {
    for (int c = 0; c < t->ncols; c++) {
      const char *s = t->cells[r * (size_t)t->ncols + (size_t)c];
      int last = c == t->ncols - 1;
      if (t->right[c]) fprintf(f, "%*s%s", (int)w[c], s, last ? "" : "  ");
      else if (last) fprintf(f, "%s", s);
      else fprintf(f, "%-*s  ", (int)w[c], s);
    }
    fputc('\n', f);
  }
  free(w);
}

void rm__table_free(rm__table_t *t)
{
  if (t == NULL) return;
  for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
  free(t->cells);
  free(t->right);
  free(t);
}
