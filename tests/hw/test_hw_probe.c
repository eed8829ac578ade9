/*
 * test_hw_probe.c - device discovery (worker/transport/probe.h).
 *
 *   test_hw_probe format   always runs: the combined list is consistent with
 *                          the per-kind probes ("none" iff zero devices), and
 *                          small buffers are truncated with "...", stay
 *                          NUL-terminated and are never overrun.
 *   test_hw_probe rdma     lists RDMA ports; exits 77 (CTest skip) with
 *                          "SKIPPED: no RDMA device (...)" when there is none
 *                          or the build has no libibverbs.
 *   test_hw_probe cuda     same for CUDA devices.
 *   test_hw_probe nccl     the real NCCL library through dlopen (worker/
 *                          device/nccl_lib.c): every entry point resolves
 *                          and ncclGetUniqueId makes an id (which needs no
 *                          GPU); 77 when no libnccl.so.2 is installed.
 */
#include <stdio.h>
#include <string.h>

#include "device/nccl.h"
#include "rm_config.h"
#include "transport/probe.h"

#define SKIP_CODE 77


#include "rm_testcheck.h"

/* entries are "; "-separated; every one must start with prefix */
static int count_entries(const char *list, const char *prefix)
{
  int n = 0;
  const char *p = list;
  while (*p) {
    CHECKF(strncmp(p, prefix, strlen(prefix)) == 0, "entry '%s' lacks '%s'", p, prefix);
    n++;
    p = strstr(p, "; ");
    if (!p)
      break;
    p += 2;
  }
  return n;
}

static void check_truncation(void)
{
  char big[64];
  size_t used = 0;
  /* the append helper itself: fill past the end */
  memset(big, 'Z', sizeof big);
  rm__devices_append(big, 16, &used, "%s", "0123456789");
  rm__devices_append(big, 16, &used, "%s", "abcdefghij");
  rm__devices_append(big, 16, &used, "%s", "more");
  CHECKF(strcmp(big, "0123456789ab...") == 0, "append overflow gave '%s'", big);
  CHECKF(big[16] == 'Z', "append wrote past len");
  /* the probe into tiny buffers */
  for (size_t len = 1; len <= 8; len++) {
    memset(big, 'Z', sizeof big);
    rm__devices_probe(big, len);
    CHECKF(memchr(big, '\0', len) != NULL, "len %zu: not NUL-terminated", len);
    CHECKF(big[len] == 'Z', "len %zu: probe wrote past len", len);
  }
}

static int mode_format(void)
{
  char all[512], cuda[512], rdma[512], why_c[256], why_r[256];
  int n_all = rm__devices_probe(all, sizeof all);
  int n_cuda = rm__cuda_devices(cuda, sizeof cuda, why_c, sizeof why_c);
  int n_rdma = rm__rdma_devices(rdma, sizeof rdma, why_r, sizeof why_r);
  printf("devices: %s\n", all);
  printf("  cuda: %d %s\n", n_cuda, n_cuda ? cuda : why_c);
  printf("  rdma: %d %s\n", n_rdma, n_rdma ? rdma : why_r);
  CHECKF(n_all == n_cuda + n_rdma, "probe %d != cuda %d + rdma %d", n_all, n_cuda, n_rdma);
  CHECKF((n_all == 0) == (strcmp(all, "none") == 0), "'none' iff no device: '%s'", all);
  if (n_cuda == 0)
    CHECKF(why_c[0] != '\0' && cuda[0] == '\0', "cuda: no reason or stray list");
  else
    CHECKF(count_entries(cuda, "cuda:") == n_cuda, "cuda entries != count");
  if (n_rdma == 0)
    CHECKF(why_r[0] != '\0' && rdma[0] == '\0', "rdma: no reason or stray list");
  else
    CHECKF(count_entries(rdma, "rdma:") == n_rdma, "rdma entries != count");
#if !RM_HAVE_CUDA
  CHECKF(n_cuda == 0 && strstr(why_c, "not built"), "cuda without RM_HAVE_CUDA: %s", why_c);
#endif
#if !RM_HAVE_RDMA
  CHECKF(n_rdma == 0 && strstr(why_r, "not built"), "rdma without RM_HAVE_RDMA: %s", why_r);
#endif
  /* a second probe gives the same answer (and logs nothing new) */
  {
    char again[512];
    CHECKF(rm__devices_probe(again, sizeof again) == n_all && strcmp(again, all) == 0,
          "second probe differs: '%s' vs '%s'", again, all);
  }
  check_truncation();
  return rm_check_failures ? 1 : 0;
}

static int mode_kind(const char *kind)
{
  char list[1024], why[256];
  int is_cuda = strcmp(kind, "cuda") == 0;
  int n = is_cuda ? rm__cuda_devices(list, sizeof list, why, sizeof why)
                  : rm__rdma_devices(list, sizeof list, why, sizeof why);
  if (n == 0) {
    printf("SKIPPED: no %s device (%s)\n", is_cuda ? "CUDA" : "RDMA", why);
    return SKIP_CODE;
  }
  printf("%s: %d device%s: %s\n", kind, n, n == 1 ? "" : "s", list);
  CHECKF(count_entries(list, is_cuda ? "cuda:" : "rdma:") == n, "entries != count");
  return rm_check_failures ? 1 : 0;
}

static int mode_nccl(void)
{
  char why[512] = "";
  rm__nccl_id_t id;
  int v = 0;
  const rm__nccl_lib_t *lib = rm__nccl_lib(why, sizeof why);
  if (lib == NULL) {
    printf("SKIPPED: no NCCL library (%s)\n", why);
    return SKIP_CODE;
  }
  CHECK(lib->GetVersion(&v) == RM__NCCL_OK);
  CHECKF(rm__nccl_unique_id(&id, why, sizeof why) == RM_OK, "unique id: %s", why);
  int nonzero = 0;
  for (int i = 0; i < RM__NCCL_ID_BYTES; i++) nonzero |= id.internal[i] != 0;
  CHECKF(nonzero, "the unique id is all zeros");
  printf("nccl: %s (version code %d): every entry point resolved, unique id made\n", lib->name, v);
  return rm_check_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "format";
  if (strcmp(mode, "format") == 0)
    return mode_format();
  if (strcmp(mode, "rdma") == 0 || strcmp(mode, "cuda") == 0)
    return mode_kind(mode);
  if (strcmp(mode, "nccl") == 0)
    return mode_nccl();
  fprintf(stderr, "usage: %s format|rdma|cuda|nccl\n", argv[0]);
  return 2;
}
