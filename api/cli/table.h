/* table.h - plain-text tables for the CLI: columns padded to their widest
 * cell, a header row, two spaces between columns, numbers right-aligned. */
#ifndef RM_API_TABLE_H
#define RM_API_TABLE_H

#include <stdio.h>

typedef struct rm__table rm__table_t;

/* headers: ncols strings; a header starting with '>' is right-aligned (the
 * '>' is not printed). */
rm__table_t *rm__table_new(int ncols, const char *const *headers);
/* Copies the ncols cells. */
void rm__table_row(rm__table_t *t, const char *const *cells);
void rm__table_print(const rm__table_t *t, FILE *f);
void rm__table_free(rm__table_t *t);

#endif
