/*
 * coll_launch.h - fork one process per rank on 127.0.0.1 for the
 * collectives tests (same shape as tests/lib's launcher, kept here so this
 * suite does not depend on the order the two were written in).
 *
 * The parent opens `world` endpoints on 127.0.0.1:0 (free ports, known before
 * any child starts), forks one child per rank; child r builds its
 * communicator on endpoint r and runs fn; its return value is its exit
 * status. The parent waits up to timeout_ms, SIGKILLs stragglers by PID and
 * returns the number of ranks that did not exit 0.
 */
#ifndef RM_TESTS_COLL_LAUNCH_H
#define RM_TESTS_COLL_LAUNCH_H

#include "ringmaster/ringmaster.h"

typedef int (*coll_test_fn)(rm_comm_t *c, void *arg);

int coll_launch(int world, coll_test_fn fn, void *arg, int timeout_ms);

#endif
