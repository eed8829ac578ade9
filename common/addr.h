/* addr.h - "host:port" / "[v6]:port" parsing, shared by worker and coordinator. */
#ifndef RM_COMMON_ADDR_H
#define RM_COMMON_ADDR_H

#include <stddef.h>

/* Split s into host (without brackets) and port. Returns 0 on success, -1 when
 * s is malformed (no port, port not in 0..65535, host too long). */
int rm__addr_split(const char *s, char *host, size_t hostlen, int *port);

#endif
