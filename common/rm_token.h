/*
 * rm_token.h - the admin token: where it comes from and how it is compared.
 *
 * ONE TOKEN guards every mutation on every interface of `ringmaster serve`:
 * the REST API's POST/DELETE endpoints ("Authorization: Bearer T") and the
 * gRPC Jobs service's SubmitJob and CancelJob (metadata "authorization:
 * Bearer T"). Reads (GET under /api/v1/, Jobs.GetJob, Jobs.ListJobs) need
 * it or the read token below, unless serve --public-reads; worker calls
 * are checked against the job's own worker token instead.
 *
 * RESOLUTION, first match wins: the --api-token flag (its alias
 * --admin-token), the --api-token-file flag (file contents, surrounding
 * whitespace trimmed), RINGMASTER_API_TOKEN, RINGMASTER_API_TOKEN_FILE. With
 * none, a random 32-hex-digit token is generated and logged once at start-up
 * (as Jupyter does), so a fresh coordinator is never open for writes.
 *
 * COMPARISON takes time independent of where the first differing byte is
 * (and of the presented token's length up to the limit), so a token cannot
 * be found byte by byte from response times.
 */
#ifndef RM_COMMON_RM_TOKEN_H
#define RM_COMMON_RM_TOKEN_H

#include <stddef.h>

#define RM_TOKEN_MAX 256

/* Resolves the token as described above into out (NUL-terminated).
 * Returns 0, or -1 with a sentence in err when a named file cannot be read
 * or the token is empty/too long. *generated is 1 when it was made up. */
int rm__token_resolve(const char *flag_token, const char *flag_file, char *out,
                      size_t outlen, int *generated, char *err, size_t errlen);

/* The READ TOKEN (docs/security.md): it may read jobs, never change them.
 * Resolved like the API token from --read-token, --read-token-file,
 * RINGMASTER_READ_TOKEN, RINGMASTER_READ_TOKEN_FILE; none is "" (only the
 * API token reads then), never generated. 0, or -1 with a sentence in err. */
int rm__read_token_resolve(const char *flag_token, const char *flag_file, char *out,
                           size_t outlen, char *err, size_t errlen);

/* Constant-time equality of the NUL-terminated `secret` and the `glen`
 * bytes at `given` (time depends only on strlen(secret) and glen). */
int rm__ct_memeq(const char *secret, const void *given, size_t glen);

/* The same for a NUL-terminated `given`. */
int rm__ct_streq(const char *secret, const char *given);

#endif
