/*
 * rm_channel.h - the gRPC channel to a coordinator as a worker opens it,
 * and the credentials of a gRPC port (the coordinator's, a relay's listen
 * side). The worker library (worker/session/control.c) compiles
 * rm_channel.c itself; the coordinator and the relay link rm_grpc_channel
 * (common/CMakeLists.txt): rm_common stays free of gRPC.
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
 * backoff grows to 120 s, during which fail-fast calls just fail), each
 * attempt given at least 5 s to finish its handshakes;
 * receiving up to RM_CHANNEL_MAX_RECEIVE. NULL with a sentence in err. */
grpc_channel *rm__channel_open(const char *addr, const char *ca, const char *cert,
                               const char *key, char *err, size_t errlen);

/* Server credentials for a gRPC port: plaintext when none of ca, cert and
 * key is given; mutual TLS when all three are (the PEM files are read now;
 * every client must present a certificate signed by ca, verified). NULL
 * with a sentence in err when only some are given or a file cannot be
 * read. */
grpc_server_credentials *rm__server_creds_open(const char *ca, const char *cert,
                                               const char *key, char *err, size_t errlen);

#endif
