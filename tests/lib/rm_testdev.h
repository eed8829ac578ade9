/*
 * rm_testdev.h - device buffers for tests, through the library's GPU runtime
 * (worker/device/gpu.h): the CUDA runtime on a machine with a GPU, the
 * stand-in GPU (a test double in host memory, tests/doubles/) when
 * RINGMASTER_TEST_GPU names libringmaster_doubles.so in a test-hook build.
 *
 *   rm_test_gpu_available(why, n)   in a forked child (CUDA must not be
 *                                   initialised in a parent that forks
 *                                   ranks): 1 when a runtime is usable,
 *                                   else 0 and why in words
 *   rm_test_dev_alloc / _free       device memory (current device 0)
 *   rm_test_dev_put / _get          synchronous copies host <-> device
 *
 * A host access to stand-in device memory faults, as with a real GPU: tests
 * read and write device buffers only through put/get.
 */
#ifndef RM_TESTS_LIB_RM_TESTDEV_H
#define RM_TESTS_LIB_RM_TESTDEV_H

#include <stddef.h>

int rm_test_gpu_available(char *why, size_t n);
/* The runtime's name ("cuda", "standin") in this process, or NULL. */
const char *rm_test_gpu_name(void);
void *rm_test_dev_alloc(size_t n);
void rm_test_dev_free(void *p);
int rm_test_dev_put(void *dev, const void *host, size_t n);
int rm_test_dev_get(void *host, const void *dev, size_t n);

#endif
