/*
 * ibvwrap.c - dlopen/dlsym loader of the verbs table (see ibvwrap.h).
 *
 * Once per process: the first rm__ibv_load() runs load_once() under
 * pthread_once; the result (status + why text) is kept and every later call
 * returns it, so the library is opened once and never closed (the handle
 * lives as long as the process, like NCCL's). RTLD_LOCAL keeps the
 * library's symbols out of the global scope: nothing else in the process
 * binds to them by accident.
 *
 * Table entries: REQ ones must resolve or the load fails naming the first
 * missing symbol (and the library is closed again); OPT ones may be NULL.
 * Symbols are looked up by their plain names: for rdma-core's versioned
 * symbols (ibv_query_port, ibv_reg_mr, ibv_create_qp, ...) dlsym gives the
 * default (newest) version, the one a program linked today would bind to.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "rm_log.h"
#include "rm_param.h"
#include "transport/rdma/ibvwrap.h"

rm__ibv_table_t rm__ibv_fn;

static pthread_once_t load_once_ctl = PTHREAD_ONCE_INIT;
static rm_status_t load_status = RM_ERR_UNSUPPORTED;
static char load_why[320];
static const char *load_path = "libibverbs.so.1";

enum { REQ = 1, OPT = 0 };

/* every entry of rm__ibv_table_t: field, exported symbol, REQ or OPT */
#define RM_IBV_ENTRIES(XX)                                                     \
  XX(get_device_list, "ibv_get_device_list", REQ)                              \
  XX(free_device_list, "ibv_free_device_list", REQ)                            \
  XX(get_device_name, "ibv_get_device_name", REQ)                              \
  XX(open_device, "ibv_open_device", REQ)                                      \
  XX(close_device, "ibv_close_device", REQ)                                    \
  XX(query_device, "ibv_query_device", REQ)                                    \
  XX(query_port, "ibv_query_port", REQ)                                        \
  XX(query_gid, "ibv_query_gid", REQ)                                          \
  XX(alloc_pd, "ibv_alloc_pd", REQ)                                            \
  XX(dealloc_pd, "ibv_dealloc_pd", REQ)                                        \
  XX(reg_mr, "ibv_reg_mr", REQ)                                                \
  XX(reg_mr_iova2, "ibv_reg_mr_iova2", OPT)                                    \
  XX(dereg_mr, "ibv_dereg_mr", REQ)                                            \
  XX(create_cq, "ibv_create_cq", REQ)                                          \
  XX(destroy_cq, "ibv_destroy_cq", REQ)                                        \
  XX(create_qp, "ibv_create_qp", REQ)                                          \
  XX(destroy_qp, "ibv_destroy_qp", REQ)                                        \
  XX(modify_qp, "ibv_modify_qp", REQ)                                          \
  XX(query_qp, "ibv_query_qp", OPT)                                            \
  XX(wc_status_str, "ibv_wc_status_str", REQ)

/* dlsym returns void *; POSIX guarantees it converts to a function pointer
 * of the right type. memcpy avoids the object-to-function cast warning. */
static int resolve(void *h, const char *sym, int required, void *slot, size_t slot_size,
                   char *why, size_t why_len)
{
  void *p;
  (void)dlerror();
  p = dlsym(h, sym);
  if (!p && required) {
    snprintf(why, why_len, "symbol %s missing in %s", sym, load_path);
    return -1;
  }
  memcpy(slot, &p, slot_size);
  return 0;
}

static void load_once(void)
{
  rm__ibv_table_t t;
  void *h;
  load_path = rm__env_str("RINGMASTER_IBVERBS_LIB", "libibverbs.so.1");
  h = dlopen(load_path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(load_why, sizeof load_why, "%s", e ? e : load_path);
    RM_DEBUG("rdma: cannot load verbs: %s", load_why);
    return;
  }
  memset(&t, 0, sizeof t);
#define RM_IBV_RESOLVE(field, sym, req)                                        \
  if (resolve(h, sym, req, &t.field, sizeof t.field, load_why, sizeof load_why) != 0) \
    goto fail;
  RM_IBV_ENTRIES(RM_IBV_RESOLVE)
#undef RM_IBV_RESOLVE
  rm__ibv_fn = t;
  load_status = RM_OK;
  RM_DEBUG("rdma: verbs loaded from %s", load_path);
  return;
fail:
  RM_DEBUG("rdma: cannot load verbs: %s", load_why);
  dlclose(h);
}

rm_status_t rm__ibv_load(char *why, size_t why_len)
{
  pthread_once(&load_once_ctl, load_once);
  if (load_status != RM_OK && why && why_len > 0)
    snprintf(why, why_len, "%s", load_why);
  return load_status;
}

const char *rm__ibv_lib_path(void)
{
  pthread_once(&load_once_ctl, load_once);
  return load_path;
}
