/*
 * doubles.h - what the test doubles of tests/doubles/ share among
 * themselves. They are built into one shared object,
 * libringmaster_doubles.so, that no installed file contains and that the
 * library never names: a test points the library's plug-in seams at it.
 *
 *   GPU   (gpu_standin.c)   the table of worker/device/gpu.h; a test-hook
 *                           build of the library loads the shared object
 *                           named by RINGMASTER_TEST_GPU and calls its
 *                           rm_test_gpu_ops() (RM__GPU_TEST_ENTRY)
 *   NCCL  (nccl_standin.c)  NCCL's own entry points (ncclGetVersion, ...),
 *                           so the library's ordinary NCCL loader takes it
 *                           as it takes libnccl.so.2: RINGMASTER_NCCL_LIB
 *                           names the same shared object (no test hook)
 *   hooks (hooks.c)         the table of common/rm_testhook.h: the
 *                           secure-aggregation kill and tamper points
 *                           (secagg_hook.c) and the TCP tap (tcp_tap.c); a
 *                           test-hook build loads the object named by
 *                           RINGMASTER_TEST_HOOKS_LIB and calls its
 *                           rm_test_hook_ops() (RM__TESTHOOK_ENTRY)
 *
 * Both in one object because the stand-in NCCL reaches the stand-in GPU's
 * memory and streams: dlopen() of one path gives one instance, so the
 * library's GPU table and NCCL table share its state.
 */
#ifndef RM_TESTS_DOUBLES_H
#define RM_TESTS_DOUBLES_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

/* What the shared object exports; everything else in it is hidden. */
#define RM_DOUBLE_API __attribute__((visibility("default")))

/* 1 once the library took the stand-in GPU's table (the stand-in NCCL
 * refuses to start without it: its device memory is the stand-in's). */
int rm__standin_gpu_in_use(void);
/* The host address of stand-in device range [p, p + n) (NULL: illegal). */
void *rm__standin_xlate(const void *p, size_t n);
/* A host function run in stream order (cudaLaunchHostFunc). */
rm_status_t rm__standin_host_fn(void *stream, void (*fn)(void *), void *arg);

/* The hook table's members (hooks.c), with rm_testhook.h's meanings. */
void rm__double_secagg_die(int rank, const char *round, uint64_t seq);
int rm__double_secagg_tamper(int rank);
void rm__double_tap(const void *buf, size_t len);

#endif
