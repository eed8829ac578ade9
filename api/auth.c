/* auth.c - the REST side of the admin token (see auth.h, rm_token.h). */
#include "auth.h"

#include <string.h>
#include <strings.h>

int rm__auth_resolve(const char *flag_token, const char *flag_file, char *out, size_t outlen,
                     int *generated, char *err, size_t errlen)
{
  return rm__token_resolve(flag_token, flag_file, out, outlen, generated, err, errlen);
}

int rm__auth_check(const char *token, const char *header)
{
  if (header == NULL || token == NULL || token[0] == '\0') return 0;
  if (strncasecmp(header, "Bearer ", 7) != 0) return 0;
  header += 7;
  while (*header == ' ') header++;
  if (strlen(header) > RM_API_TOKEN_MAX) return 0;
  return rm__ct_streq(token, header);
}
