/*
 * rm_param.h - tunables read once from the environment (NCCL_PARAM style).
 *
 *   RM_PARAM(timeout_ms, "RINGMASTER_TIMEOUT_MS", 30000)
 * defines `static int64_t rm__param_timeout_ms(void)` that parses the variable
 * the first time and caches the value (thread-safe: a racing first call just
 * parses twice and stores the same value).
 */
#ifndef RM_COMMON_PARAM_H
#define RM_COMMON_PARAM_H

#include <stdint.h>

/* Parse env var `name` as a signed integer (accepts K/M/G suffixes, powers of
 * 1024); returns `def` when unset or malformed (a warning is logged). */
int64_t rm__env_int(const char *name, int64_t def);
/* Borrowed pointer to the value, or def when unset/empty. */
const char *rm__env_str(const char *name, const char *def);

#define RM_PARAM(fn, env, def)                                                \
  static inline int64_t rm__param_##fn(void)                                  \
  {                                                                           \
    static int64_t cached;                                                    \
    static int loaded;                                                        \
    if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) {                        \
      __atomic_store_n(&cached, rm__env_int(env, def), __ATOMIC_RELAXED);     \
      __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);                         \
    }                                                                         \
    return __atomic_load_n(&cached, __ATOMIC_RELAXED);                        \
  }

#endif
