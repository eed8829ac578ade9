#include "addr.h"

#include <stdlib.h>
#include <string.h>

int rm__addr_split(const char *s, char *host, size_t hostlen, int *port)
{
  const char *colon, *hs, *he;
  char *end;
  long p;

  if (s == NULL || host == NULL || port == NULL) return -1;
  if (s[0] == '[') {
    he = strchr(s, ']');
    if (he == NULL || he[1] != ':') return -1;
    hs = s + 1;
    colon = he + 1;
  } else {
    colon = strrchr(s, ':');
    if (colon == NULL) return -1;
    hs = s;
    he = colon;
  }
  if ((size_t)(he - hs) + 1 > hostlen || he == hs) return -1;
  if (colon[1] == '\0') return -1;
  p = strtol(colon + 1, &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) return -1;
  memcpy(host, hs, (size_t)(he - hs));
  host[he - hs] = '\0';
  *port = (int)p;
  return 0;
}
