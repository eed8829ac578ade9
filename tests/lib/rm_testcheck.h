/*
 * rm_testcheck.h - the checks of the single-process test programs.
 *
 *   CHECK(cond)             on failure print "file:line: CHECK failed: cond"
 *   CHECKF(cond, fmt, ...)  same, followed by a printf-style explanation
 *   return rm_check_exit("test_x");   at the end of main: prints
 *                           "test_x: all checks passed" (exit 0) or
 *                           "test_x: N check(s) failed" (exit 1)
 *
 * A failed check counts and goes on (every failure of a run is reported);
 * rm_check_failures is the count. Header-only: one counter per program.
 */
#ifndef RM_TESTS_CHECK_H
#define RM_TESTS_CHECK_H

#include <stdio.h>

static int rm_check_failures __attribute__((unused));

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      rm_check_failures++;                                                     \
    }                                                                          \
  } while (0)

#define CHECKF(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      rm_check_failures++;                                                     \
    }                                                                          \
  } while (0)

static inline int rm_check_exit(const char *name)
{
  if (rm_check_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, rm_check_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

#endif
