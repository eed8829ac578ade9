/*
 * mlp.c - a two-layer perceptron with softmax cross-entropy, in plain C.
 *
 * Model (one sample x of `in` features, label y):
 *
 *   a = W1 x + b1          hidden pre-activations   (hidden)
 *   h = act(a)             ReLU or tanh             (hidden)
 *   z = W2 h + b2          logits                   (out)
 *   p = softmax(z)
 *   L = -log p[y]          cross-entropy
 *
 * Backward, per sample, added into the gradient buffer (never zeroed here,
 * so a caller sums a whole shard of a batch into one buffer):
 *
 *   dz = p - onehot(y)
 *   dW2 += dz h^T,   db2 += dz
 *   dh  = W2^T dz
 *   da  = dh * act'(a)      ReLU: [a > 0];  tanh: 1 - h^2
 *   dW1 += da x^T,   db1 += da
 *
 * The arithmetic is f32 with a fixed loop order, so the same inputs give the
 * same bits; softmax subtracts max(z) first. The loss that is reported is
 * accumulated in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_int.h"

/* Offsets into params/grad, see the table in train_int.h. */
typedef struct layout {
  size_t w1, b1, w2, b2;
} layout_t;

static layout_t layout_of(const rm__mlp_t *m)
{
  layout_t l;
  l.w1 = 0;
  l.b1 = (size_t)m->hidden * m->in;
  l.w2 = l.b1 + m->hidden;
  l.b2 = l.w2 + (size_t)m->out * m->hidden;
  return l;
}

rm_status_t rm__mlp_init(rm__mlp_t *m, uint32_t in, uint32_t hidden,
                         uint32_t out, int act, uint64_t seed)
{
  memset(m, 0, sizeof(*m));
  if (in == 0 || hidden == 0 || out < 2 ||
      (act != RM__ACT_RELU && act != RM__ACT_TANH))
    return RM_ERR_INVALID_ARG;
  m->in = in;
  m->hidden = hidden;
  m->out = out;
  m->act = act;
  m->nparams = (size_t)hidden * (in + 1) + (size_t)out * (hidden + 1);
  m->params = calloc(m->nparams, sizeof(float));
  m->velocity = calloc(m->nparams, sizeof(float));
  m->scratch = calloc(3 * (size_t)hidden + 2 * (size_t)out, sizeof(float));
  if (!m->params || !m->velocity || !m->scratch) {
    rm__mlp_free(m);
    return RM_ERR_NOMEM;
  }
  layout_t l = layout_of(m);
  uint64_t s = seed ^ 0x6d6c702d696e6974ULL; /* "mlp-init" */
  /* He-uniform sqrt(6 / fan_in) before ReLU, Glorot sqrt(6 / (in + out)). */
  float a1 = (float)(act == RM__ACT_RELU ? sqrt(6.0 / in)
                                         : sqrt(6.0 / (in + hidden)));
  float a2 = (float)sqrt(6.0 / (hidden + out));
  for (size_t i = 0; i < (size_t)hidden * in; i++)
    m->params[l.w1 + i] = (2.0f * rm__rng_unit(&s) - 1.0f) * a1;
  for (size_t i = 0; i < (size_t)out * hidden; i++)
    m->params[l.w2 + i] = (2.0f * rm__rng_unit(&s) - 1.0f) * a2;
  return RM_OK;
}

void rm__mlp_free(rm__mlp_t *m)
{
  free(m->params);
  free(m->velocity);
  free(m->scratch);
  m->params = m->velocity = m->scratch = NULL;
}

/* Forward pass into the scratch buffers; returns argmax(z). */
static unsigned forward(rm__mlp_t *m, const float *x, float **a_out,
                        float **h_out, float **p_out)
{
  layout_t l = layout_of(m);
  float *a = m->scratch, *h = a + m->hidden, *p = h + m->hidden;
  const float *w1 = m->params + l.w1, *b1 = m->params + l.b1;
  const float *w2 = m->params + l.w2, *b2 = m->params + l.b2;
  for (uint32_t j = 0; j < m->hidden; j++) {
    const float *row = w1 + (size_t)j * m->in;
    float s = b1[j];
    for (uint32_t i = 0; i < m->in; i++) s += row[i] * x[i];
    a[j] = s;
    h[j] = m->act == RM__ACT_RELU ? (s > 0.0f ? s : 0.0f) : tanhf(s);
  }
  unsigned best = 0;
  for (uint32_t k = 0; k < m->out; k++) {
    const float *row = w2 + (size_t)k * m->hidden;
    float s = b2[k];
    for (uint32_t j = 0; j < m->hidden; j++) s += row[j] * h[j];
    p[k] = s;
    if (s > p[best]) best = k;
  }
  float zmax = p[best], sum = 0.0f;
  for (uint32_t k = 0; k < m->out; k++) {
    p[k] = expf(p[k] - zmax);
    sum += p[k];
  }
  for (uint32_t k = 0; k < m->out; k++) p[k] /= sum;
  *a_out = a;
  *h_out = h;
  *p_out = p;
  return best;
}

static void backward(rm__mlp_t *m, const float *x, unsigned label,
                     const float *a, const float *h, const float *p,
                     float *grad)
{
  layout_t l = layout_of(m);
  float *dz = m->scratch + 2 * (size_t)m->hidden + m->out;
  float *dh = dz + m->out;
  const float *w2 = m->params + l.w2;
  for (uint32_t k = 0; k < m->out; k++)
    dz[k] = p[k] - (k == label ? 1.0f : 0.0f);
  memset(dh, 0, m->hidden * sizeof(float));
  for (uint32_t k = 0; k < m->out; k++) {
    const float *row = w2 + (size_t)k * m->hidden;
    float *g = grad + l.w2 + (size_t)k * m->hidden;
    for (uint32_t j = 0; j < m->hidden; j++) {
      g[j] += dz[k] * h[j];
      dh[j] += row[j] * dz[k];
    }
    grad[l.b2 + k] += dz[k];
  }
  for (uint32_t j = 0; j < m->hidden; j++) {
    float da = m->act == RM__ACT_RELU ? (a[j] > 0.0f ? dh[j] : 0.0f)
                                      : dh[j] * (1.0f - h[j] * h[j]);
    float *g = grad + l.w1 + (size_t)j * m->in;
    for (uint32_t i = 0; i < m->in; i++) g[i] += da * x[i];
    grad[l.b1 + j] += da;
  }
}

void rm__mlp_sample(rm__mlp_t *m, const float *x, unsigned label,
                    float *grad, double *loss, uint32_t *correct)
{
  float *a, *h, *p;
  unsigned pred = forward(m, x, &a, &h, &p);
  if (loss) {
    double pl = p[label];
    *loss += -log(pl > 1e-30 ? pl : 1e-30);
  }
  if (correct && pred == label) (*correct)++;
  if (grad) backward(m, x, label, a, h, p, grad);
}

void rm__mlp_sgd(rm__mlp_t *m, const float *grad, float lr, float momentum)
{
  for (size_t i = 0; i < m->nparams; i++) {
    float v = momentum * m->velocity[i] + grad[i];
    m->velocity[i] = v;
    m->params[i] -= lr * v;
  }
}

void rm__mlp_evaluate(rm__mlp_t *m, const rm__dataset_t *d, double *loss,
                      double *accuracy)
{
  double l = 0;
  uint32_t ok = 0;
  for (uint32_t i = 0; i < d->n; i++)
    rm__mlp_sample(m, d->x + (size_t)i * d->dim, d->y[i], NULL, &l, &ok);
  *loss = d->n ? l / d->n : NAN;
  *accuracy = d->n ? (double)ok / d->n : NAN;
}
