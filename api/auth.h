/*
 * auth.h - bearer-token authentication for mutating REST endpoints.
 *
 * The token is the coordinator's one admin token (common/rm_token.h: where
 * it comes from, why the comparison is constant-time). Requests carry
 * "Authorization: Bearer <token>".
 */
#ifndef RM_API_AUTH_H
#define RM_API_AUTH_H

#include <stddef.h>

#include "rm_token.h"

#define RM_API_TOKEN_MAX RM_TOKEN_MAX

/* rm__token_resolve (rm_token.h) under the API's name. */
int rm__auth_resolve(const char *flag_token, const char *flag_file, char *out, size_t outlen,
                     int *generated, char *err, size_t errlen);

/* 1 when header (the raw Authorization header value, may be NULL) carries
 * exactly the bearer token `token`; 0 otherwise. Constant time in the token. */
int rm__auth_check(const char *token, const char *header);

#endif
