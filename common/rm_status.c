/*
 * rm_status.c - status codes in words, generated from RM_STATUS_MAP
 * (include/ringmaster/status.h). Compiled into libringmaster and rm_common.
 */
#include "ringmaster/status.h"

const char *rm_status_name(rm_status_t st)
{
  switch (st) {
#define RM__STATUS_NAME(name, code, text) \
  case RM_##name:                         \
    return "RM_" #name;
    RM_STATUS_MAP(RM__STATUS_NAME)
#undef RM__STATUS_NAME
  }
  return "RM_UNKNOWN";
}

const char *rm_status_string(rm_status_t st)
{
  switch (st) {
#define RM__STATUS_TEXT(name, code, text) \
  case RM_##name:                         \
    return text;
    RM_STATUS_MAP(RM__STATUS_TEXT)
#undef RM__STATUS_TEXT
  }
  return "RM_UNKNOWN";
}
