/*
 * dataset.c - CSV loader, deterministic train/test split, standardisation.
 *
 * File format (data/digits/digits.csv): no header; one sample per line,
 * `dim` numbers (features) then an integer label, comma-separated. Blank
 * lines are skipped; '\r' before '\n' is accepted. Every error names the
 * file and the 1-based line (and field) so a user can fix the file.
 *
 * Determinism: the split is a Fisher-Yates permutation from a seed
 * (splitmix64), and standardisation statistics are computed in double over
 * the training rows in file order, so every rank of a job, on any machine,
 * derives byte-identical training and test sets from the same file.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_int.h"

enum { MAX_DIM = 4096 };

typedef struct loader {
  const char *path;
  FILE *f;
  char *line;
  size_t cap;
  unsigned long lineno;
  float *x;
  uint8_t *y;
  uint32_t n, cap_rows, dim;
} loader_t;

/* Parse one line into row (dim features) and *label. dim == 0 means "learn
 * it from this line" (the first one). */
static rm_status_t parse_line(loader_t *ld, uint32_t classes, float *row,
                              uint32_t *dim, unsigned *label, char *err,
                              size_t errlen)
{
  char *s = ld->line;
  double vals[MAX_DIM + 1];
  uint32_t nf = 0;
  for (;;) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v)) {
      int shown = (int)strcspn(s, ",\r\n");
      snprintf(err, errlen, "%s:%lu: field %u: not a number: '%.*s'",
               ld->path, ld->lineno, nf + 1, shown > 24 ? 24 : shown, s);
      return RM_ERR_INVALID_ARG;
    }
    if (nf == MAX_DIM + 1) {
      snprintf(err, errlen, "%s:%lu: more than %d fields", ld->path,
               ld->lineno, MAX_DIM + 1);
      return RM_ERR_INVALID_ARG;
    }
    vals[nf++] = v;
    while (*end == ' ' || *end == '\t') end++;
    if (*end == ',') {
      s = end + 1;
      continue;
    }
    if (*end == '\0' || *end == '\n' || *end == '\r') break;
    snprintf(err, errlen, "%s:%lu: field %u: unexpected '%c'", ld->path,
             ld->lineno, nf, *end);
    return RM_ERR_INVALID_ARG;
  }
  if (nf < 2 || (*dim && nf != *dim + 1)) {
    snprintf(err, errlen, "%s:%lu: expected %u fields (features + label), "
             "found %u", ld->path, ld->lineno, *dim ? *dim + 1 : 2u, nf);
    return RM_ERR_INVALID_ARG;
  }
  double lab = vals[nf - 1];
  if (lab != floor(lab) || lab < 0 || lab >= classes) {
    snprintf(err, errlen, "%s:%lu: label %g is not an integer in 0..%u",
             ld->path, ld->lineno, lab, classes - 1);
    return RM_ERR_INVALID_ARG;
  }
  *dim = nf - 1;
  if (row)
    for (uint32_t i = 0; i < *dim; i++) row[i] = (float)vals[i];
  *label = (unsigned)lab;
  return RM_OK;
}

static rm_status_t grow(loader_t *ld)
{
  uint32_t cap = ld->cap_rows ? ld->cap_rows * 2 : 256;
  float *x = realloc(ld->x, (size_t)cap * ld->dim * sizeof(float));
  if (!x) return RM_ERR_NOMEM;
  ld->x = x;
  uint8_t *y = realloc(ld->y, cap);
  if (!y) return RM_ERR_NOMEM;
  ld->y = y;
  ld->cap_rows = cap;
  return RM_OK;
}

static int blank(const char *s)
{
  for (; *s; s++)
    if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n') return 0;
  return 1;
}

rm_status_t rm__dataset_load_csv(const char *path, uint32_t classes,
                                 rm__dataset_t *out, char *err, size_t errlen)
{
  rm_status_t st = RM_OK;
  loader_t ld = {.path = path};
  if (classes < 2 || classes > 256) {
    snprintf(err, errlen, "%s: bad class count %u", path, classes);
    return RM_ERR_INVALID_ARG;
  }
  ld.f = fopen(path, "r");
  if (!ld.f) {
    snprintf(err, errlen, "cannot open dataset '%s': %s", path,
             strerror(errno));
    return errno == ENOENT ? RM_ERR_NOT_FOUND : RM_ERR_SYSTEM;
  }
  while (getline(&ld.line, &ld.cap, ld.f) >= 0) {
    ld.lineno++;
    if (blank(ld.line)) continue;
    unsigned label = 0;
    uint32_t dim = ld.dim;
    float *row = NULL;
    if (ld.dim && ld.n == ld.cap_rows && (st = grow(&ld)) != RM_OK) goto fail;
    if (ld.dim) row = ld.x + (size_t)ld.n * ld.dim;
    st = parse_line(&ld, classes, row, &dim, &label, err, errlen);
    if (st != RM_OK) goto fail;
    if (!ld.dim) { /* first row: learn dim, then parse it again into place */
      ld.dim = dim;
      if ((st = grow(&ld)) != RM_OK) goto fail;
      parse_line(&ld, classes, ld.x, &dim, &label, err, errlen);
    }
    ld.y[ld.n++] = (uint8_t)label;
  }
  if (ferror(ld.f)) {
    snprintf(err, errlen, "%s: read error after line %lu: %s", path,
             ld.lineno, strerror(errno));
    st = RM_ERR_SYSTEM;
    goto fail;
  }
  if (ld.n == 0) {
    snprintf(err, errlen, "%s: no samples", path);
    st = RM_ERR_INVALID_ARG;
    goto fail;
  }
  out->n = ld.n;
  out->dim = ld.dim;
  out->classes = classes;
  out->x = ld.x;
  out->y = ld.y;
  ld.x = NULL;
  ld.y = NULL;
fail:
  if (st == RM_ERR_NOMEM) snprintf(err, errlen, "%s: out of memory", path);
  free(ld.x);
  free(ld.y);
  free(ld.line);
  fclose(ld.f);
  return st;
}

static rm_status_t subset(const rm__dataset_t *all, const uint32_t *idx,
                          uint32_t n, rm__dataset_t *out)
{
  out->n = n;
  out->dim = all->dim;
  out->classes = all->classes;
  out->x = malloc((size_t)n * all->dim * sizeof(float) + 1);
  out->y = malloc((size_t)n + 1);
  if (!out->x || !out->y) {
    rm__dataset_free(out);
    return RM_ERR_NOMEM;
  }
  for (uint32_t i = 0; i < n; i++) {
    memcpy(out->x + (size_t)i * all->dim, all->x + (size_t)idx[i] * all->dim,
           all->dim * sizeof(float));
    out->y[i] = all->y[idx[i]];
  }
  return RM_OK;
}

rm_status_t rm__dataset_split(const rm__dataset_t *all, uint64_t seed,
                              uint32_t test_div, rm__dataset_t *train,
                              rm__dataset_t *test)
{
  rm_status_t st = RM_OK;
  uint32_t ntest = test_div ? all->n / test_div : 0;
  if (ntest == 0 || ntest >= all->n) return RM_ERR_INVALID_ARG;
  uint32_t *perm = malloc((size_t)all->n * sizeof(uint32_t));
  if (!perm) return RM_ERR_NOMEM;
  rm__permute(perm, all->n, seed);
  rm__dataset_t te = {0}, tr = {0};
  st = subset(all, perm, ntest, &te);
  if (st != RM_OK) goto out;
  st = subset(all, perm + ntest, all->n - ntest, &tr);
  if (st != RM_OK) {
    rm__dataset_free(&te);
    goto out;
  }
  *train = tr;
  *test = te;
out:
  free(perm);
  return st;
}

static void scale(rm__dataset_t *d, const double *mean, const double *inv)
{
  for (uint32_t i = 0; i < d->n; i++)
    for (uint32_t j = 0; j < d->dim; j++) {
      float *v = &d->x[(size_t)i * d->dim + j];
      *v = (float)((*v - mean[j]) * inv[j]);
    }
}

void rm__dataset_standardize(rm__dataset_t *train, rm__dataset_t *test)
{
  uint32_t dim = train->dim;
  double mean[MAX_DIM], inv[MAX_DIM];
  for (uint32_t j = 0; j < dim; j++) {
    double s = 0, ss = 0;
    for (uint32_t i = 0; i < train->n; i++) s += train->x[(size_t)i * dim + j];
    mean[j] = s / train->n;
    for (uint32_t i = 0; i < train->n; i++) {
      double dv = train->x[(size_t)i * dim + j] - mean[j];
      ss += dv * dv;
    }
    double sd = sqrt(ss / train->n);
    inv[j] = sd > 1e-12 ? 1.0 / sd : 1.0;
  }
  scale(train, mean, inv);
  if (test) scale(test, mean, inv);
}

void rm__dataset_free(rm__dataset_t *d)
{
  free(d->x);
  free(d->y);
  d->x = NULL;
  d->y = NULL;
  d->n = 0;
}
