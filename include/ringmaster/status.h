/*
 * status.h - libringmaster's status codes: one list, three generated views
 * (enum, name, text), libuv's UV_ERRNO_MAP habit.
 *
 * Included by ringmaster.h; stands alone so that code which only reports
 * statuses (the coordinator, common/rm_check.h) needs nothing else. The
 * names are implemented in common/rm_status.c, compiled into libringmaster
 * and into rm_common.
 */
#ifndef RINGMASTER_STATUS_H
#define RINGMASTER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#ifndef RM_EXTERN
#if defined(_WIN32)
#define RM_EXTERN
#elif defined(RM_BUILDING_LIBRARY)
#define RM_EXTERN __attribute__((visibility("default")))
#else
#define RM_EXTERN
#endif
#endif

#define RM_STATUS_MAP(XX)                                                     \
  XX(OK, 0, "success")                                                        \
  XX(ERR_INVALID_ARG, 1, "invalid argument")                                  \
  XX(ERR_NOMEM, 2, "out of memory")                                           \
  XX(ERR_SYSTEM, 3, "system call failed")                                     \
  XX(ERR_PEER_LOST, 4, "peer lost")                                           \
  XX(ERR_TIMEOUT, 5, "deadline exceeded")                                     \
  XX(ERR_PROTOCOL, 6, "protocol error on data-plane connection")              \
  XX(ERR_ABORTED, 7, "communicator aborted")                                  \
  XX(ERR_STALE_GENERATION, 8, "stale generation")                             \
  XX(ERR_UNSUPPORTED, 9, "not supported by this build or device")             \
  XX(ERR_UNAVAILABLE, 10, "service unavailable")                              \
  XX(ERR_NOT_FOUND, 11, "not found")                                          \
  XX(ERR_DENIED, 12, "permission denied")                                     \
  XX(ERR_INTERNAL, 13, "internal error")                                      \
  XX(ERR_RECONFIGURED, 14, "membership changed: re-form the session")         \
  XX(ERR_JOB_ENDED, 15, "the job ended")

typedef enum {
#define RM__STATUS_ENUM(name, code, text) RM_##name = code,
  RM_STATUS_MAP(RM__STATUS_ENUM)
#undef RM__STATUS_ENUM
} rm_status_t;

/* "RM_ERR_PEER_LOST" and "peer lost"; never NULL, "RM_UNKNOWN" for junk. */
RM_EXTERN const char *rm_status_name(rm_status_t st);
RM_EXTERN const char *rm_status_string(rm_status_t st);

#ifdef __cplusplus
}
#endif

#endif
