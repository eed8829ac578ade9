/*
 * rm_check.h - check macros with one exit path (NCCL checks.h style).
 *
 *   RM_CHECK(call)   on failure logs "file:line -> RM_ERR_X" at debug level and
 *                    returns the status, so a failure prints a call chain.
 *   RM_CHECK_GOTO(call, st, label)   stores the status in st and jumps.
 */
#ifndef RM_COMMON_CHECK_H
#define RM_COMMON_CHECK_H

#include "ringmaster/status.h"
#include "rm_log.h"

#define RM_CHECK(call)                                                        \
  do {                                                                        \
    rm_status_t rm__st = (call);                                              \
    if (rm__st != RM_OK) {                                                    \
      RM_DEBUG("%s -> %s", #call, rm_status_name(rm__st));                    \
      return rm__st;                                                          \
    }                                                                         \
  } while (0)

#define RM_CHECK_GOTO(call, st, label)                                        \
  do {                                                                        \
    (st) = (call);                                                            \
    if ((st) != RM_OK) {                                                      \
      RM_DEBUG("%s -> %s", #call, rm_status_name(st));                        \
      goto label;                                                             \
    }                                                                         \
  } while (0)

#endif
