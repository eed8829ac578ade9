/* store.h - what the generated migrations table looks like (store.c uses it). */
#ifndef RM_COORDINATOR_STORE_H
#define RM_COORDINATOR_STORE_H
#include <stddef.h>
struct rm__migration {
  const char *name;
  const char *sql;
};
extern const struct rm__migration rm__migrations[];
extern const int rm__migration_count;
#endif
