/*
 * errors.h - every error code the REST API can answer, with the HTTP
 * statuses it comes with: the one list.
 *
 * Every error body is {"error": {"code", "message", "field"}} (resp.c
 * rm__resp_error). A client generated from api/openapi.json with strict
 * enums must be able to read every one of them, so:
 *
 *   - rm__resp_error() checks each answer against this list and logs an
 *     error for a code or a code/status pair that is not on it (a bug in
 *     the server, never in the client);
 *   - tests/api/test_openapi.py reads this file and fails unless
 *     openapi.json's Error.code enum is exactly these codes and its
 *     "x-ringmaster-status" map gives exactly these statuses;
 *   - the API tests validate every answer they receive against
 *     openapi.json (tests/api/contract.py), so a code sent on a path or
 *     with a status the document does not give fails there too.
 *
 * Format: one X(code, status) per code. A code has exactly one status, so
 * a client can branch on either and never see them disagree.
 */
#ifndef RM_API_ERRORS_H
#define RM_API_ERRORS_H

#define RM__API_ERRORS(X)                                                                   \
  /* the request itself: framing, target, headers */                                        \
  X(invalid_request, 400)       /* malformed HTTP, path, query or header */                 \
  X(too_many_parameters, 400)   /* more query parameters than RM__QUERY_MAX */              \
  X(uri_too_long, 414)          /* request target past RM__URI_MAX */                       \
  X(headers_too_large, 431)     /* headers past the connection's memory */                  \
  X(payload_too_large, 413)     /* body past --max-body, or a Content-Length too large */   \
  X(not_implemented, 501)       /* a Transfer-Encoding other than chunked */                \
  /* the body and the query */                                                              \
  X(invalid_json, 400)                                                                      \
  X(invalid_type, 400)                                                                      \
  X(invalid_value, 400)                                                                     \
  X(unknown_field, 400)                                                                     \
  X(missing_field, 400)                                                                     \
  /* who and what */                                                                        \
  X(unauthorized, 401)                                                                      \
  X(not_found, 404)                                                                         \
  X(method_not_allowed, 405)                                                                \
  X(conflict, 409)                                                                          \
  /* the server */                                                                          \
  X(internal, 500)                                                                          \
  X(unavailable, 503)           /* the store is not ready */                                \
  X(too_many_streams, 503)      /* event streams at their limit; Retry-After */         \
  X(storage_full, 507)          /* a write refused: the database's disk is full */        \
  X(storage_error, 503)         /* a write refused, or /readyz: the store cannot write */

/* 1 when code is on the list with status; 0 otherwise. */
int rm__api_error_known(const char *code, unsigned status);

#endif
