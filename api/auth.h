/*
 * auth.h - bearer-token authentication for mutating REST endpoints.
 *
 * The token comes, first match wins, from: the --api-token flag, the
 * --api-token-file flag (file contents, surrounding whitespace trimmed), the
 * RINGMASTER_API_TOKEN environment variable, the RINGMASTER_API_TOKEN_FILE
 * environment variable. When none is given the server generates a random
 * 32-hex-digit token and logs it once at start-up (as Jupyter does), so a
 * fresh server is never open for writes.
 *
 * Requests carry "Authorization: Bearer <token>". The comparison takes time
 * independent of where the first differing byte is (and of the presented
 * token's length up to the limit), so the token cannot be found byte by byte
 * from response times.
 */
#ifndef RM_API_AUTH_H
#define RM_API_AUTH_H

#include <stddef.h>

#define RM_API_TOKEN_MAX 256

/* Resolves the token as described above into out (NUL-terminated).
 * Returns 0, or -1 with a message in err when a named file cannot be read or
 * the token is empty/too long. *generated is set to 1 when it was made up. */
int rm__auth_resolve(const char *flag_token, const char *flag_file, char *out, size_t outlen,
                     int *generated, char *err, size_t errlen);

/* 1 when header (the raw Authorization header value, may be NULL) carries
 * exactly the bearer token `token`; 0 otherwise. Constant time in the token. */
int rm__auth_check(const char *token, const char *header);

/* Constant-time equality of two NUL-terminated strings (time depends only on
 * the length of `secret`). */
int rm__ct_streq(const char *secret, const char *given);

#endif
