/* rm_token.c - admin token resolution and constant-time comparison (see
 * rm_token.h). */
#include "rm_token.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static int read_token_file(const char *path, char *out, size_t outlen, char *err,
                           size_t errlen)
{
  char buf[RM_TOKEN_MAX + 64];
  size_t n = 0, start = 0;
  int rc = -1;
  FILE *f = fopen(path, "r");

  if (f == NULL) {
    snprintf(err, errlen, "cannot read API token file %s: %s", path, strerror(errno));
    return -1;
  }
  n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  while (n > 0 && isspace((unsigned char)buf[n - 1])) buf[--n] = '\0';
  while (start < n && isspace((unsigned char)buf[start])) start++;
  if (n - start == 0 || n - start >= outlen || n - start > RM_TOKEN_MAX ||
      memchr(buf + start, '\0', n - start)) {
    snprintf(err, errlen, "API token file %s is empty, holds a NUL byte or is longer than %d "
             "bytes", path, RM_TOKEN_MAX);
  } else {
    memcpy(out, buf + start, n - start + 1);
    rc = 0;
  }
  fclose(f);
  return rc;
}

static int copy_token(const char *tok, char *out, size_t outlen, char *err, size_t errlen)
{
  size_t n = strlen(tok);
  if (n == 0 || n >= outlen || n > RM_TOKEN_MAX) {
    snprintf(err, errlen, "API token is empty or longer than %d bytes", RM_TOKEN_MAX);
    return -1;
  }
  memcpy(out, tok, n + 1);
  return 0;
}

static int generate(char *out, size_t outlen, char *err, size_t errlen)
{
  unsigned char raw[16];
  if (outlen < 33 || getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    snprintf(err, errlen, "cannot generate an API token: %s", strerror(errno));
    return -1;
  }
  for (size_t i = 0; i < sizeof raw; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
  return 0;
}

int rm__token_resolve(const char *flag_token, const char *flag_file, char *out,
                      size_t outlen, int *generated, char *err, size_t errlen)
{
  const char *env = getenv("RINGMASTER_API_TOKEN");
  const char *env_file = getenv("RINGMASTER_API_TOKEN_FILE");

  *generated = 0;
  if (flag_token && *flag_token) return copy_token(flag_token, out, outlen, err, errlen);
  if (flag_file && *flag_file) return read_token_file(flag_file, out, outlen, err, errlen);
  if (env && *env) return copy_token(env, out, outlen, err, errlen);
  if (env_file && *env_file) return read_token_file(env_file, out, outlen, err, errlen);
  *generated = 1;
  return generate(out, outlen, err, errlen);
}

int rm__read_token_resolve(const char *flag_token, const char *flag_file, char *out,
                           size_t outlen, char *err, size_t errlen)
{
  const char *env = getenv("RINGMASTER_READ_TOKEN");
  const char *env_file = getenv("RINGMASTER_READ_TOKEN_FILE");
  out[0] = '\0';
  if (flag_token && *flag_token) return copy_token(flag_token, out, outlen, err, errlen);
  if (flag_file && *flag_file) return read_token_file(flag_file, out, outlen, err, errlen);
  if (env && *env) return copy_token(env, out, outlen, err, errlen);
  if (env_file && *env_file) return read_token_file(env_file, out, outlen, err, errlen);
  return 0;
}

int rm__ct_memeq(const char *secret, const void *given, size_t glen)
{
  const unsigned char *g = given;
  size_t n = strlen(secret);
  unsigned diff = (unsigned)(n != glen);

  /* Walk the secret's length; bytes past the end of `given` compare against
   * 0 (a secret never holds one), so the loop never returns early. */
  for (size_t i = 0; i < n; i++)
    diff |= (unsigned)((i < glen ? g[i] : 0u) ^ (unsigned char)secret[i]);
  return diff == 0;
}

int rm__ct_streq(const char *secret, const char *given)
{
  size_t gl = strnlen(given, RM_TOKEN_MAX + 1);
  return rm__ct_memeq(secret, given, gl);
}
