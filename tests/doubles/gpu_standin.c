/*
 * gpu_standin.c - TEST DOUBLE: a GPU in host memory behind gpu.h.
 *
 * Built into tests/doubles' shared object (doubles.h), never into the
 * library; a test-hook build of the library uses it when the process sets
 * RINGMASTER_TEST_GPU to that object's path. Nothing real exists to test the device
 * paths against on a machine without a GPU; this double keeps the
 * properties those paths depend on, so the same code is exercised:
 *
 *  1. Device memory is not host memory. The "device address space" is one
 *     PROT_NONE reservation (1 TiB of addresses, nothing committed); an
 *     allocation is a memfd mapped read-write at a private address, which
 *     the "device" itself uses, and carved from the reservation at the
 *     address the caller gets (any host load or store through it faults,
 *     as dereferencing a cudaMalloc pointer on the host does). Copies and
 *     kernels translate. Allocations are placed with a gap at least their
 *     own size after them and never reused, so an access past the end of
 *     one lands in no allocation: an illegal address (5), never another
 *     buffer or host memory.
 *  2. Work is asynchronous and ordered per stream. A stream is a thread
 *     with a FIFO of operations (copy, zero, reduce, scale, wait-for-event); the
 *     caller returns at once. RINGMASTER_TEST_GPU_DELAY_US=D makes every
 *     operation sleep a random 0..D us first, so a consumer that forgets
 *     to wait for an event reads stale bytes and the tests see it.
 *  3. Events capture a stream's position when recorded: record sets
 *     (stream, number of operations enqueued so far); query is done when
 *     the stream has finished that many; stream_wait enqueues "wait until
 *     that stream reaches that position" (CUDA's cudaStreamWaitEvent).
 *     The NULL stream is synchronous: work on it runs in the caller.
 *  4. IPC between processes: the handle is (pid, fd, length) of the
 *     owner's memfd; ipc_open maps /proc/PID/fd/FD (same user), so two
 *     processes see the same bytes as with cudaIpcOpenMemHandle, and
 *     nothing is left in /dev/shm when a process dies.
 *  5. Errors are sticky for the device, as a CUDA context's: an operation
 *     on a device range that is not inside one allocation (an illegal
 *     address) stops every stream, and every later query or enqueue fails
 *     with the words in err(). As on a GPU, whose engines have stopped by
 *     the time the host hears of the fault, the host sees the error only
 *     once no operation is still running on another stream (g_running).
 *  6. A hung GPU: RINGMASTER_TEST_GPU_STALL_AFTER=N stops every stream of
 *     the process after N operations until it is destroyed.
 *  7. GPUDirect RDMA: with RINGMASTER_TEST_GPU_GDR=1 an allocation is also
 *     mapped read-write at its device address, as a NIC with nvidia-peermem
 *     reaches GPU memory; the verbs test double (tests/rdma_emu) then
 *     moves device memory itself. (The library's own code must still not
 *     touch it; the runs without GDR are the ones that check that.)
 *
 * Reductions run the CPU kernels (reduce.h) on the translated pointers, so
 * results equal the host path bit for bit.
 */
#define _GNU_SOURCE /* memfd_create */
#include "device/gpu.h"
#include "doubles.h"


#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "reduce/reduce.h"
#include "rm_log.h"
#include "rm_param.h"

RM_PARAM(standin_delay_us, "RINGMASTER_TEST_GPU_DELAY_US", 0)
/* The GPU stops answering after this many operations (all streams of the
 * process): the stall the device deadline must catch. 0 = never. */
RM_PARAM(standin_stall_after, "RINGMASTER_TEST_GPU_STALL_AFTER", 0)
RM_PARAM(standin_gdr, "RINGMASTER_TEST_GPU_GDR", 0)
static uint64_t g_executed;

static __thread char t_err[256];

#define SA_MAGIC 0x52534741u /* "RSGA" */

typedef struct sa_alloc {
  uintptr_t dev;  /* PROT_NONE view handed out */
  char *back;     /* read-write view */
  size_t len;     /* mapped length (pages) */
  int fd;         /* owner: the memfd (kept for IPC); imported: -1 */
  int imported;
} sa_alloc_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static sa_alloc_t *g_allocs;
static int g_n, g_cap;
#define SA_SPACE ((size_t)1 << 40)
static uintptr_t g_space, g_next; /* the reservation; next free address */

/* The reservation, made once (caller holds g_lock). */
static int space_locked(void)
{
  if (g_space == 0) {
    void *p = mmap(NULL, SA_SPACE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    g_space = g_next = (uintptr_t)p;
  }
  return 0;
}

static int in_space(uintptr_t p) { return g_space != 0 && p >= g_space && p < g_space + SA_SPACE; }

static rm_status_t err_set(rm_status_t st, const char *fmt, const char *a, int e)
{
  snprintf(t_err, sizeof t_err, fmt, a, strerror(e));
  return st;
}

/* Index of the allocation containing p, or -1. Caller holds g_lock. */
static int find_locked(uintptr_t p)
{
  for (int i = 0; i < g_n; i++)
    if (p >= g_allocs[i].dev && p < g_allocs[i].dev + g_allocs[i].len) return i;
  return -1;
}

/* Host address for [p, p + n): the read-write view of a device range, p
 * itself for host memory. NULL when a device range is not inside one
 * allocation (an illegal address). */
static void *xlate(const void *p, size_t n)
{
  uintptr_t u = (uintptr_t)p;
  void *out = (void *)p;
  pthread_mutex_lock(&g_lock);
  if (in_space(u)) {
    int i = find_locked(u);
    const sa_alloc_t *a = i >= 0 ? &g_allocs[i] : NULL;
    out = a == NULL || n > a->len - (u - a->dev) ? NULL : a->back + (u - a->dev);
  }
  pthread_mutex_unlock(&g_lock);
  return out;
}

/* Map back (len bytes of fd, or an imported mapping) as device memory:
 * OUT its device address. */
static rm_status_t reg(char *back, size_t len, int fd, int imported, uintptr_t *dev)
{
  pthread_mutex_lock(&g_lock);
  if (space_locked() != 0 || g_next + 2 * len > g_space + SA_SPACE) {
    pthread_mutex_unlock(&g_lock);
    return RM_ERR_NOMEM;
  }
  *dev = g_next;
  g_next += 2 * len; /* the allocation, then a gap as long: top of file */
  /* 7: the memory at its device address too, for the emulated NIC */
  if (fd >= 0 && rm__param_standin_gdr() &&
      mmap((void *)*dev, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    pthread_mutex_unlock(&g_lock);
    return RM_ERR_NOMEM;
  }
  if (g_n == g_cap) {
    int cap = g_cap ? 2 * g_cap : 16;
    sa_alloc_t *na = realloc(g_allocs, (size_t)cap * sizeof *na);
    if (na == NULL) {
      pthread_mutex_unlock(&g_lock);
      return RM_ERR_NOMEM;
    }
    g_allocs = na;
    g_cap = cap;
  }
  g_allocs[g_n++] = (sa_alloc_t){.dev = *dev, .back = back, .len = len, .fd = fd, .imported = imported};
  pthread_mutex_unlock(&g_lock);
  return RM_OK;
}

/* Remove the allocation based at dev; OUT its record. 0 when none. */
static int unreg(uintptr_t dev, sa_alloc_t *out)
{
  int found = 0;
  pthread_mutex_lock(&g_lock);
  int i = find_locked(dev);
  if (i >= 0 && g_allocs[i].dev == dev) {
    *out = g_allocs[i];
    g_allocs[i] = g_allocs[--g_n];
    found = 1;
  }
  pthread_mutex_unlock(&g_lock);
  return found;
}

static size_t page_round(size_t n)
{
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return ((n ? n : 1) + pg - 1) / pg * pg;
}

static int sa_ptr_is_device(const void *p, int *dev)
{
  pthread_mutex_lock(&g_lock);
  int in = in_space((uintptr_t)p);
  pthread_mutex_unlock(&g_lock);
  if (!in) return 0;
  if (dev) *dev = 0;
  return 1;
}

static int sa_device_count(void) { return 1; }

static rm_status_t sa_set_device(int dev, int *prev)
{
  if (prev) *prev = 0;
  if (dev != 0) {
    snprintf(t_err, sizeof t_err, "stand-in GPU has one device, not %d", dev);
    return RM_ERR_INVALID_ARG;
  }
  return RM_OK;
}

static rm_status_t sa_dev_alloc(size_t n, void **p)
{
  size_t len = page_round(n);
  int fd = memfd_create("rm-standin-gpu", MFD_CLOEXEC);
  char *back;
  uintptr_t dev;
  if (fd < 0) return err_set(RM_ERR_SYSTEM, "stand-in %s: %s", "memfd_create", errno);
  if (ftruncate(fd, (off_t)len) != 0) {
    int e = errno;
    close(fd);
    return err_set(RM_ERR_NOMEM, "stand-in %s: %s", "ftruncate", e);
  }
  back = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (back == MAP_FAILED || reg(back, len, fd, 0, &dev) != RM_OK) {
    int e = errno;
    if (back != MAP_FAILED) munmap(back, len);
    close(fd);
    return err_set(RM_ERR_NOMEM, "stand-in %s: %s", "mmap", e);
  }
  *p = (void *)dev;
  return RM_OK;
}

/* The device addresses stay reserved (never reused: top of file). */
static void sa_unmap(const sa_alloc_t *a)
{
  if (!a->imported && rm__param_standin_gdr()) /* 7: back to PROT_NONE */
    (void)mmap((void *)a->dev, a->len, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  munmap(a->back, a->len);
  if (a->fd >= 0) close(a->fd);
}

static void sa_dev_free(void *p)
{
  sa_alloc_t a;
  if (p && unreg((uintptr_t)p, &a)) sa_unmap(&a);
}

static rm_status_t sa_host_alloc(size_t n, void **p)
{
  void *q = NULL;
  if (posix_memalign(&q, 64, n ? n : 1) != 0) return RM_ERR_NOMEM;
  *p = q;
  return RM_OK;
}

static void sa_host_free(void *p) { free(p); }

/* ---- streams ---- */

enum { OP_COPY, OP_ZERO, OP_REDUCE, OP_SCALE, OP_WAIT, OP_HOST };

typedef struct sa_stream sa_stream_t;

typedef struct sa_op {
  int kind;
  void *dst;
  const void *src;
  size_t n;
  rm_dtype_t dt;
  rm_op_t op;
  int world;
  sa_stream_t *ws;   /* OP_WAIT: the stream waited for (held: refs) ... */
  uint64_t wpos;     /* ... until it finished this many operations */
  void (*fn)(void *); /* OP_HOST */
  void *arg;
  struct sa_op *next;
} sa_op_t;

/* Freed when the last reference goes: its owner's (until destroy) and
 * one per OP_WAIT of another stream that names it. */
struct sa_stream {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sa_op_t *head, *tail;
  uint64_t enq;    /* operations enqueued (under mu) */
  uint64_t done;   /* finished (atomic) */
  int stop;        /* atomic: destroyed */
  int refs;        /* atomic */
  unsigned seed;
};

typedef struct sa_event {
  sa_stream_t *s; /* NULL: never recorded, or on the NULL stream */
  uint64_t pos;
} sa_event_t;

/* The device's sticky error (5 at the top): a fault ends every stream.
 * g_running counts copies, zeroing and kernels past their fault check in
 * the engines (not waits or host functions, which may block). An
 * engine raises it, then checks g_failed; the host reads g_failed, then
 * waits for g_running to reach 0 (all seq_cst): an operation either saw
 * the fault and did not run, or the host waits until it finished. */
static int g_failed;
static int g_running;
static char g_why[200];

static void device_fault(const char *why)
{
  pthread_mutex_lock(&g_lock);
  if (!g_failed) snprintf(g_why, sizeof g_why, "%s", why);
  __atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&g_lock);
}

static int faulted(void) { return __atomic_load_n(&g_failed, __ATOMIC_SEQ_CST); }

static void nap_us(long us);

/* The host's view of the fault: reported once nothing runs any more. */
static int fault_seen(void)
{
  if (!faulted()) return 0;
  while (__atomic_load_n(&g_running, __ATOMIC_SEQ_CST) > 0) nap_us(20);
  return 1;
}

static void nap_us(long us)
{
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void stream_unref(sa_stream_t *s)
{
  if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static void op_free(sa_op_t *o)
{
  if (o->kind == OP_WAIT) stream_unref(o->ws);
  free(o);
}

/* Runs one operation in a stream's thread, or in the caller for the NULL
 * stream. 0, or -1 after a fault. */
static int run_op(const sa_op_t *o)
{
  void *d;
  const void *src;
  char why[200];
  size_t esz = o->kind == OP_COPY || o->kind == OP_ZERO ? 1 : rm_dtype_size(o->dt);
  if (o->kind == OP_HOST) {
    o->fn(o->arg);
    return 0;
  }
  if (o->kind == OP_WAIT) {
    /* a destroyed stream drained before it went, or stalled for good */
    while (__atomic_load_n(&o->ws->done, __ATOMIC_ACQUIRE) < o->wpos && !faulted() &&
           !__atomic_load_n(&o->ws->stop, __ATOMIC_ACQUIRE))
      nap_us(20);
    return faulted() ? -1 : 0;
  }
  d = xlate(o->dst, o->n * esz);
  src = o->kind == OP_SCALE || o->kind == OP_ZERO ? d : xlate(o->src, o->n * esz);
  if (d == NULL || src == NULL) {
    snprintf(why, sizeof why, "stand-in GPU: illegal address (%zu bytes at %p <- %p)",
             o->n * esz, o->dst, o->src);
    device_fault(why);
    return -1;
  }
  if (o->kind == OP_COPY) memmove(d, src, o->n);
  else if (o->kind == OP_ZERO) memset(d, 0, o->n);
  else if (o->kind == OP_REDUCE) rm__reduce_fn(o->dt, o->op)(d, src, o->n);
  else rm__scale_avg(d, o->n, o->dt, o->world);
  return 0;
}

static void *engine(void *arg)
{
  sa_stream_t *s = arg;
  long delay = (long)rm__param_standin_delay_us();
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    sa_op_t *o = s->head;
    if (o == NULL) {
      pthread_mutex_unlock(&s->mu);
      return NULL;
    }
    s->head = o->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    if (delay > 0) nap_us((long)(rand_r(&s->seed) % (unsigned)delay));
    int64_t stall = rm__param_standin_stall_after();
    if (stall > 0 && __atomic_add_fetch(&g_executed, 1, __ATOMIC_ACQ_REL) >= (uint64_t)stall) {
      op_free(o); /* hung: nothing more runs; the queue goes at destroy */
      while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) nap_us(1000);
      return NULL;
    }
    int touches = o->kind != OP_WAIT && o->kind != OP_HOST; /* memory, briefly */
    if (touches) __atomic_add_fetch(&g_running, 1, __ATOMIC_SEQ_CST);
    if (!faulted()) (void)run_op(o);
    if (touches) __atomic_sub_fetch(&g_running, 1, __ATOMIC_SEQ_CST);
    op_free(o);
    __atomic_add_fetch(&s->done, 1, __ATOMIC_ACQ_REL);
  }
}

static rm_status_t enqueue(sa_stream_t *s, const sa_op_t *tmpl)
{
  if (fault_seen()) {
    snprintf(t_err, sizeof t_err, "%s", g_why);
    return RM_ERR_SYSTEM;
  }
  if (s == NULL) { /* the NULL stream: synchronous */
    if (run_op(tmpl) != 0) {
      snprintf(t_err, sizeof t_err, "%s", g_why);
      return RM_ERR_SYSTEM;
    }
    return RM_OK;
  }
  sa_op_t *o = malloc(sizeof *o);
  if (o == NULL) return RM_ERR_NOMEM;
  *o = *tmpl;
  o->next = NULL;
  if (o->kind == OP_WAIT) __atomic_add_fetch(&o->ws->refs, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = o;
  else s->head = o;
  s->tail = o;
  s->enq++;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return RM_OK;
}

static rm_status_t sa_stream_create(void **out)
{
  sa_stream_t *s = calloc(1, sizeof *s);
  if (s == NULL) return RM_ERR_NOMEM;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->refs = 1;
  s->seed = (unsigned)getpid() ^ (unsigned)(uintptr_t)s;
  if (pthread_create(&s->th, NULL, engine, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return err_set(RM_ERR_SYSTEM, "stand-in %s: %s", "pthread_create", errno);
  }
  *out = s;
  return RM_OK;
}

/* Drains what is queued (unless stalled), joins the thread, drops the
 * owner's reference. */
static void sa_stream_destroy(void *p)
{
  sa_stream_t *s = p;
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->th, NULL);
  for (sa_op_t *o = s->head, *n; o; o = n) { /* left by a stall */
    n = o->next;
    op_free(o);
  }
  s->head = s->tail = NULL;
  stream_unref(s);
}

static rm_status_t sa_event_create(void **e)
{
  *e = calloc(1, sizeof(sa_event_t));
  return *e ? RM_OK : RM_ERR_NOMEM;
}

static void sa_event_destroy(void *e) { free(e); }

static rm_status_t sa_event_record(void *ev, void *sp)
{
  sa_event_t *e = ev;
  sa_stream_t *s = sp;
  e->s = s;
  if (s) {
    pthread_mutex_lock(&s->mu);
    e->pos = s->enq;
    pthread_mutex_unlock(&s->mu);
  }
  return RM_OK;
}

static int sa_event_query(void *ev)
{
  const sa_event_t *e = ev;
  if (fault_seen()) {
    snprintf(t_err, sizeof t_err, "%s", g_why);
    return -1;
  }
  if (e->s == NULL) return 1;
  return __atomic_load_n(&e->s->done, __ATOMIC_ACQUIRE) >= e->pos;
}

static rm_status_t sa_stream_wait(void *s, void *ev)
{
  const sa_event_t *e = ev;
  if (e->s == NULL || e->s == s) return RM_OK; /* nothing, or already ordered */
  return enqueue(s, &(sa_op_t){.kind = OP_WAIT, .ws = e->s, .wpos = e->pos});
}

static rm_status_t sa_copy(void *dst, const void *src, size_t n, void *s)
{
  if (n == 0) return RM_OK;
  return enqueue(s, &(sa_op_t){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}

static rm_status_t sa_zero(void *dst, size_t n, void *s)
{
  if (n == 0) return RM_OK;
  return enqueue(s, &(sa_op_t){.kind = OP_ZERO, .dst = dst, .n = n});
}

static rm_status_t sa_reduce(void *dst, const void *src, size_t count, rm_dtype_t dt,
                             rm_op_t op, void *s)
{
  if (rm__reduce_fn(dt, op) == NULL || ((dst == NULL || src == NULL) && count > 0))
    return RM_ERR_INVALID_ARG;
  if (count == 0) return RM_OK;
  return enqueue(s, &(sa_op_t){.kind = OP_REDUCE, .dst = dst, .src = src, .n = count,
                               .dt = dt, .op = op});
}

static rm_status_t sa_scale_avg(void *buf, size_t count, rm_dtype_t dt, int world, void *s)
{
  if (count == 0) return RM_OK;
  return enqueue(s, &(sa_op_t){.kind = OP_SCALE, .dst = buf, .n = count, .dt = dt,
                               .world = world});
}

void *rm__standin_xlate(const void *p, size_t n) { return xlate(p, n); }

rm_status_t rm__standin_host_fn(void *stream, void (*fn)(void *), void *arg)
{
  return enqueue(stream, &(sa_op_t){.kind = OP_HOST, .fn = fn, .arg = arg});
}

/* ---- IPC ---- */

/* pid and fd reach the memfd; dev (never reused: top of file) makes the
 * bytes unique per allocation, as a CUDA handle's are. */
typedef struct sa_handle {
  uint32_t magic;
  int32_t pid, fd;
  uint64_t len;
  uint64_t dev;
} sa_handle_t;

static rm_status_t sa_ipc_get(const void *p, rm__ipc_handle_t *h, size_t *off)
{
  sa_handle_t sh = {.magic = SA_MAGIC, .pid = (int32_t)getpid()};
  pthread_mutex_lock(&g_lock);
  int i = find_locked((uintptr_t)p);
  if (i >= 0 && !g_allocs[i].imported) {
    sh.fd = g_allocs[i].fd;
    sh.len = g_allocs[i].len;
    sh.dev = g_allocs[i].dev;
    *off = (size_t)((uintptr_t)p - g_allocs[i].dev);
  }
  pthread_mutex_unlock(&g_lock);
  if (sh.len == 0) {
    snprintf(t_err, sizeof t_err, "stand-in GPU: %p is not memory of this process's device", p);
    return RM_ERR_INVALID_ARG;
  }
  memset(h, 0, sizeof *h);
  memcpy(h->bytes, &sh, sizeof sh);
  return RM_OK;
}

static rm_status_t sa_ipc_open(const rm__ipc_handle_t *h, void **base)
{
  sa_handle_t sh;
  char path[64];
  memcpy(&sh, h->bytes, sizeof sh);
  if (sh.magic != SA_MAGIC || sh.len == 0) {
    snprintf(t_err, sizeof t_err, "stand-in GPU: not an IPC handle");
    return RM_ERR_INVALID_ARG;
  }
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)sh.pid, (int)sh.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return err_set(RM_ERR_SYSTEM, "stand-in ipc_open %s: %s", path, errno);
  char *back = mmap(NULL, sh.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (back == MAP_FAILED) return err_set(RM_ERR_SYSTEM, "stand-in ipc_open %s: %s", path, e);
  uintptr_t dev;
  if (reg(back, sh.len, -1, 1, &dev) != RM_OK) {
    munmap(back, sh.len);
    return RM_ERR_NOMEM;
  }
  *base = (void *)dev;
  return RM_OK;
}

static void sa_ipc_close(void *base)
{
  sa_alloc_t a;
  if (base && unreg((uintptr_t)base, &a)) sa_unmap(&a);
}

static const char *sa_err(void) { return t_err; }

static int sa_gdr(void) { return rm__param_standin_gdr() != 0; }

static const rm__gpu_ops_t standin_ops = {
    .name = "standin",
    .ptr_is_device = sa_ptr_is_device,
    .device_count = sa_device_count,
    .set_device = sa_set_device,
    .dev_alloc = sa_dev_alloc,
    .dev_free = sa_dev_free,
    .host_alloc = sa_host_alloc,
    .host_free = sa_host_free,
    .stream_create = sa_stream_create,
    .stream_destroy = sa_stream_destroy,
    .event_create = sa_event_create,
    .event_destroy = sa_event_destroy,
    .event_record = sa_event_record,
    .event_query = sa_event_query,
    .stream_wait = sa_stream_wait,
    .copy = sa_copy,
    .zero = sa_zero,
    .reduce = sa_reduce,
    .scale_avg = sa_scale_avg,
    .ipc_get = sa_ipc_get,
    .ipc_open = sa_ipc_open,
    .ipc_close = sa_ipc_close,
    .err = sa_err,
    .gdr = sa_gdr,
};

static int g_in_use;

int rm__standin_gpu_in_use(void) { return __atomic_load_n(&g_in_use, __ATOMIC_ACQUIRE); }

/* The seam's entry (gpu.h, RM__GPU_TEST_ENTRY): the library passes the size
 * of its table, so a stale shared object from another build is refused
 * rather than called through a different layout. */
RM_DOUBLE_API const rm__gpu_ops_t *rm_test_gpu_ops(size_t table_size);

const rm__gpu_ops_t *rm_test_gpu_ops(size_t table_size)
{
  if (table_size != sizeof(rm__gpu_ops_t)) return NULL;
  __atomic_store_n(&g_in_use, 1, __ATOMIC_RELEASE);
  RM_INFO("gpu: the stand-in GPU (a test double in host memory) is in use");
  return &standin_ops;
}
