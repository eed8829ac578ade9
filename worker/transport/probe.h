/*
 * probe.h - what accelerator / RDMA hardware this process can see.
 *
 * Discovery only: the data paths are the RDMA transport (transport/rdma/)
 * and the device-memory layer (device/). The agent reports this list to the
 * coordinator (Join.devices, at most 255 characters) so an operator can see
 * what a worker has.
 *
 * Format (one line, "; " between entries, truncated with "..." if long):
 *
 *   cuda:0 NVIDIA H200 (139 GiB, sm_90); rdma:mlx5_0 port1 ACTIVE InfiniBand
 *   none
 *
 * Which probes exist depends on the build (rm_config.h): libibverbs only when
 * RM_HAVE_RDMA, the CUDA runtime only when RM_HAVE_CUDA. The CUDA runtime is
 * linked statically (cudart_static), and it loads the driver (libcuda.so.1)
 * itself at the first call, so a CUDA build starts and runs on a machine with
 * no GPU driver; the probe then reports "no CUDA driver".
 *
 * A missing device or driver is not an error: the probe says so (the `why`
 * text, and one info log line per kind per process) and returns 0 devices.
 * The probes never block for long and are safe to call repeatedly, but are
 * not meant for hot paths. On a GPU machine the CUDA probe initialises the
 * CUDA driver in the calling process (that is how cudaGetDeviceCount works),
 * and CUDA does not survive fork(): probe in the process that reports, not
 * in a parent that will fork children which use the GPU.
 */
#ifndef RM_WORKER_TRANSPORT_PROBE_H
#define RM_WORKER_TRANSPORT_PROBE_H

#include <stddef.h>

/* Fill buf (always NUL-terminated when len > 0) with the device list, or
 * "none". Returns the number of devices listed (CUDA devices + RDMA ports),
 * 0 when none. */
int rm__devices_probe(char *buf, size_t len);

/* One kind at a time, for tests and the agent. Each returns the number of
 * devices written to buf (entries as above, "; "-separated, "" when none);
 * when it returns 0, `why` (may be NULL) says why in words, e.g.
 * "no driver: libcuda.so.1: cannot open shared object file: ...",
 * "ibv_get_device_list: Function not implemented" or
 * "not built (RINGMASTER_WITH_RDMA=OFF or no libibverbs)". */
int rm__cuda_devices(char *buf, size_t len, char *why, size_t why_len);
int rm__rdma_devices(char *buf, size_t len, char *why, size_t why_len);

/* Append printf-style text to buf at *used, keeping it NUL-terminated;
 * on overflow the tail becomes "..." and later appends do nothing. */
void rm__devices_append(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
