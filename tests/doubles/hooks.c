/*
 * hooks.c - the hook table of tests/doubles' shared object: what a
 * test-hook build of the library calls at its test points
 * (common/rm_testhook.h) when RINGMASTER_TEST_HOOKS_LIB names this object.
 * Each member does nothing unless the environment asks for it
 * (secagg_hook.c, tcp_tap.c), so a test may name the object for one hook
 * and leave the others off.
 */
#include "doubles.h"
#include "rm_testhook.h"

static const rm__testhook_ops_t hook_ops = {
    .secagg_die = rm__double_secagg_die,
    .secagg_tamper = rm__double_secagg_tamper,
    .tap = rm__double_tap,
};

RM_DOUBLE_API const rm__testhook_ops_t *rm_test_hook_ops(size_t table_size);

const rm__testhook_ops_t *rm_test_hook_ops(size_t table_size)
{
  return table_size == sizeof(rm__testhook_ops_t) ? &hook_ops : NULL;
}
