/*
 * ibvwrap.h - the verbs the RDMA transport uses, reached through a table
 * loaded with dlopen (NCCL's ibvwrap habit). Built only when RM_HAVE_RDMA
 * (the build found infiniband/verbs.h; the types come from it).
 *
 * Why a table: libringmaster must start on machines without libibverbs.so.1
 * (no NEEDED entry for it from this code), and tests point the table at the
 * test double tests/rdma_emu/librm_verbs_emu.so instead of the real library.
 *
 * Loading: rm__ibv_load() dlopen()s RINGMASTER_IBVERBS_LIB (read once; a file
 * name or path) or "libibverbs.so.1", and dlsym()s every entry below. It runs
 * once per process (pthread_once); later calls return the first result and
 * the same `why`. A missing library or a missing required symbol is
 * RM_ERR_UNSUPPORTED with `why` saying which, e.g.
 *   "libibverbs.so.1: cannot open shared object file: No such file or directory"
 *   "symbol ibv_create_qp missing in /path/lib.so"
 * never a crash. The table is filled only on success.
 *
 * Calling: only through the rm__ibv_* wrappers below, and only after
 * rm__ibv_load() returned RM_OK in this process. Each wrapper has the
 * signature and return convention of the verb it is named after
 * (rdma-core's man pages). Three kinds:
 *
 *   resolved   plain exported functions: called through the table.
 *   versioned  ibv_query_port and ibv_reg_mr are macros around inline
 *              functions in verbs.h; the wrappers do what those inlines do
 *              (extended-context op first, then the exported symbol, which
 *              dlsym() without a version gives as the default version,
 *              IBVERBS_1.1 in rdma-core).
 *   data path  ibv_post_send / ibv_post_recv / ibv_poll_cq are static inline
 *              in verbs.h and dispatch through context->ops of the object's
 *              provider; the wrappers do the same, so any provider (a real
 *              HCA's or the test double's) works without a symbol.
 *
 * Optional entries (NULL when the library lacks them): query_qp,
 * reg_mr_iova2. rm__ibv_query_qp returns EOPNOTSUPP without it.
 */
#ifndef RM_WORKER_TRANSPORT_RDMA_IBVWRAP_H
#define RM_WORKER_TRANSPORT_RDMA_IBVWRAP_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "ringmaster/ringmaster.h"

typedef struct rm__ibv_table {
  struct ibv_device **(*get_device_list)(int *num_devices);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *device);
  struct ibv_context *(*open_device)(struct ibv_device *device);
  int (*close_device)(struct ibv_context *context);
  int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
  /* exported ibv_query_port: takes the compat (prefix) layout of the attr */
  int (*query_port)(struct ibv_context *context, uint8_t port_num,
                    struct _compat_ibv_port_attr *port_attr);
  int (*query_gid)(struct ibv_context *context, uint8_t port_num, int index,
                   union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
  int (*dealloc_pd)(struct ibv_pd *pd);
  /* exported ibv_reg_mr (verbs.h hides it behind a macro of the same name) */
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t length,
                                 uint64_t iova, unsigned int access); /* optional */
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                              struct ibv_comp_channel *channel, int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*destroy_qp)(struct ibv_qp *qp);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
  int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                  struct ibv_qp_init_attr *init_attr); /* optional */
  const char *(*wc_status_str)(enum ibv_wc_status status);
} rm__ibv_table_t;

/* Filled by rm__ibv_load(); read-only afterwards. Use the wrappers. */
extern rm__ibv_table_t rm__ibv_fn;

/* Load the library and resolve the table (once per process, thread-safe).
 * RM_OK, or RM_ERR_UNSUPPORTED with the reason in why (may be NULL). */
rm_status_t rm__ibv_load(char *why, size_t why_len);
/* The path the loader used (RINGMASTER_IBVERBS_LIB or "libibverbs.so.1");
 * borrowed, valid for the process lifetime. */
const char *rm__ibv_lib_path(void);

/* ---- resolved ---- */
static inline struct ibv_device **rm__ibv_get_device_list(int *n)
{
  return rm__ibv_fn.get_device_list(n);
}
static inline void rm__ibv_free_device_list(struct ibv_device **list)
{
  rm__ibv_fn.free_device_list(list);
}
static inline const char *rm__ibv_get_device_name(struct ibv_device *d)
{
  return rm__ibv_fn.get_device_name(d);
}
static inline struct ibv_context *rm__ibv_open_device(struct ibv_device *d)
{
  return rm__ibv_fn.open_device(d);
}
static inline int rm__ibv_close_device(struct ibv_context *c)
{
  return rm__ibv_fn.close_device(c);
}
static inline int rm__ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
  return rm__ibv_fn.query_device(c, a);
}
static inline int rm__ibv_query_gid(struct ibv_context *c, uint8_t port, int index,
                                    union ibv_gid *gid)
{
  return rm__ibv_fn.query_gid(c, port, index, gid);
}
static inline struct ibv_pd *rm__ibv_alloc_pd(struct ibv_context *c)
{
  return rm__ibv_fn.alloc_pd(c);
}
static inline int rm__ibv_dealloc_pd(struct ibv_pd *pd) { return rm__ibv_fn.dealloc_pd(pd); }
static inline int rm__ibv_dereg_mr(struct ibv_mr *mr) { return rm__ibv_fn.dereg_mr(mr); }
static inline struct ibv_cq *rm__ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                                               struct ibv_comp_channel *ch, int vec)
{
  return rm__ibv_fn.create_cq(c, cqe, cq_context, ch, vec);
}
static inline int rm__ibv_destroy_cq(struct ibv_cq *cq) { return rm__ibv_fn.destroy_cq(cq); }
static inline struct ibv_qp *rm__ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
  return rm__ibv_fn.create_qp(pd, a);
}
static inline int rm__ibv_destroy_qp(struct ibv_qp *qp) { return rm__ibv_fn.destroy_qp(qp); }
static inline int rm__ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
  return rm__ibv_fn.modify_qp(qp, a, mask);
}
static inline int rm__ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
                                   struct ibv_qp_init_attr *init)
{
  if (!rm__ibv_fn.query_qp)
    return EOPNOTSUPP;
  return rm__ibv_fn.query_qp(qp, a, mask, init);
}
static inline const char *rm__ibv_wc_status_str(enum ibv_wc_status s)
{
  return rm__ibv_fn.wc_status_str(s);
}

/* ---- versioned (verbs.h inlines, done the same way) ---- */
/* ___ibv_query_port: the provider's extended op when the context has one,
 * else the exported symbol on a zeroed attr (it fills the compat prefix). */
static inline int rm__ibv_query_port(struct ibv_context *c, uint8_t port,
                                     struct ibv_port_attr *attr)
{
  struct verbs_context *vctx = verbs_get_ctx_op(c, query_port);
  if (!vctx) {
    memset(attr, 0, sizeof(*attr));
    return rm__ibv_fn.query_port(c, port, (struct _compat_ibv_port_attr *)attr);
  }
  return vctx->query_port(c, port, attr, sizeof(*attr));
}
/* __ibv_reg_mr: access flags of the optional range need ibv_reg_mr_iova2
 * (EOPNOTSUPP when the library predates it). */
static inline struct ibv_mr *rm__ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                                            unsigned int access)
{
  if ((access & IBV_ACCESS_OPTIONAL_RANGE) == 0)
    return rm__ibv_fn.reg_mr(pd, addr, length, (int)access);
  if (!rm__ibv_fn.reg_mr_iova2) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  return rm__ibv_fn.reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

/* ---- data path (verbs.h inlines: provider ops of the object) ---- */
static inline int rm__ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                    struct ibv_send_wr **bad_wr)
{
  return qp->context->ops.post_send(qp, wr, bad_wr);
}
static inline int rm__ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                    struct ibv_recv_wr **bad_wr)
{
  return qp->context->ops.post_recv(qp, wr, bad_wr);
}
/* Never blocks: returns the number of completions written (0..n) or < 0. */
static inline int rm__ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
  return cq->context->ops.poll_cq(cq, n, wc);
}

#endif
