/*
 * robust.c - the math of robust aggregation and vector helpers (no I/O).
 *
 * INPUT. `rows` gradients x_1..x_n (n = rows) of dimension d = count, stored
 * back to back. Up to f of them may be arbitrary (Byzantine: wrong, huge,
 * NaN). Values are widened to double; a NaN is read as +inf so that the
 * order is total and a NaN is simply an extreme value.
 *
 * COORDINATE-WISE MEDIAN (Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust
 * Distributed Learning: Towards Optimal Statistical Rates", ICML 2018):
 *   out[j] = median(x_1[j], ..., x_n[j]); for even n the mean of the two
 *   middle order statistics. Breakdown point 1/2: while f < n/2, out[j]
 *   lies within [min, max] of the honest values of coordinate j.
 *
 * COORDINATE-WISE TRIMMED MEAN (same paper): sort coordinate j, drop the
 *   `trim` smallest and `trim` largest values, average the n - 2*trim left.
 *   With f <= trim Byzantine rows the result of each coordinate is within
 *   [min, max] of the honest values. Requires 2*trim < n; trim = 0 is the
 *   plain mean.
 *
 * CLIPPED MEAN: every row is scaled by min(1, tau / ||x_r||_2) (its own norm
 *   clipped to tau) and the clipped rows are averaged: one row can move the
 *   result by at most tau / n in L2, whatever it holds. Rows whose norm is
 *   not finite are dropped (mean over the rest). O(d * n), the per-row
 *   factors kept in `work`.
 *
 * COST. Median and trimmed mean gather each coordinate's n values into
 *   `work` and sort them: O(d * n log n) time, O(n) extra space (insertion
 *   sort for n <= 32, qsort above). The column gather is strided (one cache
 *   line per row per coordinate); fine for the moderate n this is for.
 *
 * NORM CLIPPING (rm__clip_norm): x <- x * tau/||x|| when ||x|| > tau; the
 *   norm is accumulated in double, so f32 vectors of any length are clipped
 *   to within one f32 rounding of tau.
 */
#include "aggregate/aggregate.h"

#include <math.h>
#include <stdlib.h>

#include "reduce/reduce.h"

static int is_float(rm_dtype_t dt)
{
  return dt == RM_F32 || dt == RM_F64 || dt == RM_F16 || dt == RM_BF16;
}

static double load(const void *p, size_t i, rm_dtype_t dt)
{
  switch (dt) {
  case RM_F32: return ((const float *)p)[i];
  case RM_F64: return ((const double *)p)[i];
  case RM_F16: return rm__f16_to_f32(((const unsigned short *)p)[i]);
  case RM_BF16: return rm__bf16_to_f32(((const unsigned short *)p)[i]);
  default: return NAN;
  }
}

static void store(void *p, size_t i, rm_dtype_t dt, double v)
{
  switch (dt) {
  case RM_F32: ((float *)p)[i] = (float)v; break;
  case RM_F64: ((double *)p)[i] = v; break;
  case RM_F16: ((unsigned short *)p)[i] = rm__f32_to_f16((float)v); break;
  case RM_BF16: ((unsigned short *)p)[i] = rm__f32_to_bf16((float)v); break;
  default: break;
  }
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void sort_small(double *v, int n)
{
  if (n > 32) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return;
  }
  for (int i = 1; i < n; i++) {
    double x = v[i];
    int j = i - 1;
    for (; j >= 0 && v[j] > x; j--) v[j + 1] = v[j];
    v[j + 1] = x;
  }
}

/* column j of the rows, NaN read as +inf, sorted ascending */
static void sorted_column(const void *data, int rows, size_t count,
                          rm_dtype_t dt, size_t j, double *col)
{
  for (int r = 0; r < rows; r++) {
    double v = load(data, (size_t)r * count + j, dt);
    col[r] = isnan(v) ? INFINITY : v;
  }
  sort_small(col, rows);
}

static void combine_sorted(const void *data, int rows, size_t count,
                           rm_dtype_t dt, const rm__robust_opts_t *o,
                           void *out, double *work)
{
  for (size_t j = 0; j < count; j++) {
    sorted_column(data, rows, count, dt, j, work);
    double v;
    if (o->method == RM__ROBUST_MEDIAN) {
      v = (rows % 2) ? work[rows / 2]
                     : 0.5 * (work[rows / 2 - 1] + work[rows / 2]);
    } else {
      double sum = 0.0;
      for (int r = o->trim; r < rows - o->trim; r++) sum += work[r];
      v = sum / (double)(rows - 2 * o->trim);
    }
    store(out, j, dt, v);
  }
}

/* work[r] = clip factor of row r, or 0 for a dropped (non-finite) row */
static rm_status_t combine_clipped(const void *data, int rows, size_t count,
                                   rm_dtype_t dt, double tau, void *out,
                                   double *work)
{
  size_t esz = rm_dtype_size(dt);
  int kept = 0;
  for (int r = 0; r < rows; r++) {
    double nrm = rm__l2_norm((const char *)data + (size_t)r * count * esz,
                             count, dt);
    work[r] = !isfinite(nrm) ? 0.0 : (nrm > tau ? tau / nrm : 1.0);
    kept += isfinite(nrm) ? 1 : 0;
  }
  if (kept == 0) return RM_ERR_INVALID_ARG;
  for (size_t j = 0; j < count; j++) {
    double sum = 0.0;
    for (int r = 0; r < rows; r++)
      if (work[r] != 0.0) sum += work[r] * load(data, (size_t)r * count + j, dt);
    store(out, j, dt, sum / (double)kept);
  }
  return RM_OK;
}

rm_status_t rm__robust_combine(const void *data, int rows, size_t count,
                               rm_dtype_t dt, const rm__robust_opts_t *o,
                               void *out, double *work)
{
  if (o == NULL || rows < 1 || !is_float(dt) || work == NULL ||
      (count > 0 && (data == NULL || out == NULL)))
    return RM_ERR_INVALID_ARG;
  switch (o->method) {
  case RM__ROBUST_MEDIAN:
  case RM__ROBUST_TRIMMED_MEAN:
    if (o->trim < 0 ||
        (o->method == RM__ROBUST_TRIMMED_MEAN && 2 * o->trim >= rows))
      return RM_ERR_INVALID_ARG;
    combine_sorted(data, rows, count, dt, o, out, work);
    return RM_OK;
  case RM__ROBUST_CLIPPED_MEAN:
    if (!(o->clip_norm > 0.0) || !isfinite(o->clip_norm))
      return RM_ERR_INVALID_ARG;
    return combine_clipped(data, rows, count, dt, o->clip_norm, out, work);
  default:
    return RM_ERR_INVALID_ARG;
  }
}

double rm__l2_norm(const void *buf, size_t count, rm_dtype_t dt)
{
  if (!is_float(dt)) return NAN;
  double ss = 0.0;
  for (size_t i = 0; i < count; i++) {
    double v = load(buf, i, dt);
    ss += v * v;
  }
  return sqrt(ss);
}

rm_status_t rm__scale(void *buf, size_t count, rm_dtype_t dt, double factor)
{
  if (!is_float(dt) || (buf == NULL && count > 0)) return RM_ERR_INVALID_ARG;
  if (dt == RM_F32) {
    float *f = buf, s = (float)factor;
    for (size_t i = 0; i < count; i++) f[i] *= s;
  } else if (dt == RM_F64) {
    double *d = buf;
    for (size_t i = 0; i < count; i++) d[i] *= factor;
  } else {
    for (size_t i = 0; i < count; i++) store(buf, i, dt, load(buf, i, dt) * factor);
  }
  return RM_OK;
}

rm_status_t rm__clip_norm(void *buf, size_t count, rm_dtype_t dt,
                          double max_norm, double *norm_before)
{
  if (!is_float(dt) || !(max_norm > 0.0) || (buf == NULL && count > 0))
    return RM_ERR_INVALID_ARG;
  double nrm = rm__l2_norm(buf, count, dt);
  if (!isfinite(nrm)) return RM_ERR_INVALID_ARG;
  if (nrm > max_norm) rm__scale(buf, count, dt, max_norm / nrm);
  if (norm_before != NULL) *norm_before = nrm;
  return RM_OK;
}
