/*
 * rm_transports.c - offers and the pair rule (rm_transports.h).
 */
#include "rm_transports.h"

#include <stdio.h>
#include <string.h>

static const char *const k_default = "tcp";

/* Next token of *p into tok (NUL-terminated); 0 at the end. */
static int next_token(const char **p, char *tok, size_t n)
{
  const char *s = *p;
  size_t k = 0;
  while (*s == ' ') s++;
  if (*s == '\0') return 0;
  while (*s && *s != ' ') {
    if (k + 1 < n) tok[k++] = *s;
    s++;
  }
  tok[k] = '\0';
  *p = s;
  return 1;
}

static const char *or_default(const char *offer)
{
  const char *s = offer;
  if (s == NULL) return k_default;
  while (*s == ' ') s++;
  return *s ? offer : k_default;
}

/* Tokens with a scope: "<kind>:<scope>/<rest>". The first N_TRANSPORT_KINDS
 * name transports: two ranks can use one when both offer the kind with the
 * same scope (shm: the host; rdma: the fabric). The rest are capabilities
 * that name no transport of their own (the pair rule never picks them):
 * "cuda:<host>/<rest>" says this rank can move device memory by CUDA IPC
 * with ranks of the same <host>. */
static const char *const k_kinds[] = {"shm", "rdma", "cuda"};
enum { N_TRANSPORT_KINDS = 2, N_KINDS = sizeof k_kinds / sizeof k_kinds[0] };

/* Whether [s, s + n) is non-empty and all of [a-z0-9._-]. */
static int plain_run(const char *s, size_t n)
{
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
          strchr("._-", s[i]) != NULL))
      return 0;
  return 1;
}

/* Token t[0..n) of a well-formed offer: a known kind must be
 * "<kind>:<scope>/<rest>" with a non-empty scope of [a-z0-9._-] and a
 * non-empty rest, "tcp" is bare; an unknown kind only must not start with
 * ':' or '/' (a newer worker's token is skipped, not judged). */
static int token_ok(const char *t, size_t n)
{
  if (t[0] == ':' || t[0] == '/') return 0;
  for (size_t i = 0; i < N_KINDS; i++) {
    size_t k = strlen(k_kinds[i]);
    if (n > k && strncmp(t, k_kinds[i], k) == 0 && t[k] == ':') {
      const char *scope = t + k + 1, *end = t + n;
      const char *slash = memchr(scope, '/', (size_t)(end - scope));
      return slash != NULL && plain_run(scope, (size_t)(slash - scope)) && slash + 1 < end;
    }
  }
  return 1;
}

int rm_tp_offer_valid(const char *offer, char *why, size_t why_len)
{
  size_t n = offer ? strlen(offer) : 0;
  if (n >= RM_TP_OFFER_MAX) {
    snprintf(why, why_len, "transports offer is %zu bytes, at most %d", n,
             RM_TP_OFFER_MAX - 1);
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    char ch = offer[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
          strchr(" :/._-", ch) != NULL)) {
      snprintf(why, why_len, "transports offer has byte 0x%02x at %zu "
               "(allowed: a-z 0-9 : / . _ - and spaces)",
               (unsigned)(unsigned char)ch, i);
      return 0;
    }
  }
  /* tokens: separated by single spaces, none empty, each well formed;
   * the empty offer (an old worker: "tcp") has none */
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && offer[j] != ' ') j++;
    if (j == i) {
      snprintf(why, why_len, "transports offer has an empty token at %zu "
               "(tokens are separated by single spaces)", i);
      return 0;
    }
    if (!token_ok(offer + i, j - i)) {
      snprintf(why, why_len, "transports offer token \"%.*s\" at %zu is malformed "
               "(shm:<host>/<nonce>, rdma:<fabric>/<address>, cuda:<host>/<rest>, tcp)", (int)(j - i > 64 ? 64 : j - i),
               offer + i, i);
      return 0;
    }
    i = j + 1;
    if (j + 1 == n) {
      snprintf(why, why_len, "transports offer ends with a space");
      return 0;
    }
  }
  return 1;
}


/* The scoped kind of token t ("shm", "rdma"), or NULL. */
static const char *scoped_kind(const char *t)
{
  for (size_t i = 0; i < N_TRANSPORT_KINDS; i++) {
    size_t n = strlen(k_kinds[i]);
    if (strncmp(t, k_kinds[i], n) == 0 && t[n] == ':' && strchr(t + n, '/'))
      return k_kinds[i];
  }
  return NULL;
}

/* Whether `offer` has a token that matches tok (same kind and scope). */
static int offers_too(const char *offer, const char *tok)
{
  char t[RM_TP_OFFER_MAX];
  const char *p = or_default(offer);
  const char *slash = strchr(tok, '/');
  size_t scopelen = slash ? (size_t)(slash - tok) : strlen(tok);
  int scoped = scoped_kind(tok) != NULL;
  while (next_token(&p, t, sizeof t)) {
    if (scoped) {
      if (strncmp(t, tok, scopelen) == 0 && t[scopelen] == '/') return 1;
    } else if (strcmp(t, tok) == 0) {
      return 1;
    }
  }
  return 0;
}

const char *rm_tp_pick(const char *lo, const char *hi)
{
  char t[RM_TP_OFFER_MAX];
  const char *p = or_default(lo);
  while (next_token(&p, t, sizeof t)) {
    const char *kind = scoped_kind(t);
    if (kind && offers_too(hi, t)) return kind;
    if (strcmp(t, "tcp") == 0 && offers_too(hi, t)) return "tcp";
  }
  return NULL;
}

/* offer's first "<kind>:<scope>/<rest>" token: its scope and rest (rest
 * may be NULL); 0 when there is none. */
static int token_parts(const char *offer, const char *kind, char *scope, size_t scope_len,
                       char *rest, size_t rest_len)
{
  char t[RM_TP_OFFER_MAX];
  const char *p = or_default(offer);
  size_t k = strlen(kind);
  while (next_token(&p, t, sizeof t)) {
    char *slash = strchr(t, '/');
    if (strncmp(t, kind, k) != 0 || t[k] != ':' || slash == NULL) continue;
    *slash = '\0';
    snprintf(scope, scope_len, "%s", t + k + 1);
    if (rest) snprintf(rest, rest_len, "%s", slash + 1);
    return 1;
  }
  return 0;
}

int rm_tp_offer_shm(const char *offer, char *host, size_t host_len,
                    char *nonce, size_t nonce_len)
{
  return token_parts(offer, "shm", host, host_len, nonce, nonce_len);
}

int rm_tp_cuda_ipc(const char *lo, const char *hi)
{
  char a[RM_TP_OFFER_MAX], b[RM_TP_OFFER_MAX], ra[RM_TP_OFFER_MAX], rb[RM_TP_OFFER_MAX];
  const char *t = rm_tp_pick(lo, hi);
  if (t == NULL || strcmp(t, "shm") != 0) return 0;
  if (!token_parts(lo, "cuda", a, sizeof a, ra, sizeof ra) ||
      !token_parts(hi, "cuda", b, sizeof b, rb, sizeof rb))
    return 0;
  /* both speak this protocol, on the host of the pair's shared memory */
  if (strcmp(ra, "ipc1") != 0 || strcmp(rb, "ipc1") != 0 || strcmp(a, b) != 0) return 0;
  return token_parts(lo, "shm", b, sizeof b, NULL, 0) && strcmp(a, b) == 0;
}
