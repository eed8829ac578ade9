/*
 * rm_channel.h - the gRPC channel to a coordinator as a worker opens it,
 * shared by the worker library (worker/session/control.c) and the host
 * relay (relay/relay.c), which compile rm_channel.c themselves: rm_common
 * stays free of gRPC.
 */
#ifndef RM_COMMON_RM_CHANNEL_H
#define RM_COMMON_RM_CHANNEL_H

#include <grpc/grpc.h>
#include <stddef.h>

/* The largest message such a channel receives. A Join answer carries every
 * peer (about 90 bytes each with a shared-memory offer): past ~46,000
 * workers it outgrows gRPC's default 4 MiB, which also bounds a gzip
 * answer's inflated size. */
#define RM_CHANNEL_MAX_RECEIVE (256 << 20)

/* A channel to addr (grpc_init already called): plaintext unless ca, cert
 * and key are all given (mutual TLS; the PEM files are read now);
 * reconnecting within 500 ms after a coordinator restart (gRPC's default
 * backoff grows to 120 s, during which fail-fast calls just fail);
 * receiving up to RM_CHANNEL_MAX_RECEIVE. NULL with a sentence in err. */
grpc_channel *rm__channel_open(const char *addr, const char *ca, const char *cert,
                               const char *key, char *err, size_t errlen);

#endif
