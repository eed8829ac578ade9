/*
 * listen.c - the REST server's listening socket (host:port, port 0 = a free
 * one, IPv4 or IPv6) and its share of the process's file descriptors
 * (RLIMIT_NOFILE raised to the hard limit; a quarter, at most
 * RM__FD_RESERVE, kept for gRPC, SQLite and the workers' logs).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "api_int.h"
#include "rm_log.h"

/* Descriptors kept for the rest of the process (gRPC, SQLite, workers'
 * logs) when the limit is low: at most this many, at most a quarter. */
#define RM__FD_RESERVE 1024

int rm__http_listen(rm_api_t *api, const char *listen_addr, char *err, size_t errlen)
{
  char host[128], port_s[8];
  int port, fd = -1, one = 1, rc;
  struct addrinfo hints = {0}, *ai = NULL;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;

  if (rm__addr_split(listen_addr, host, sizeof host, &port) != 0) {
    snprintf(err, errlen, "bad --http address '%s' (want host:port)", listen_addr);
    return -1;
  }
  snprintf(port_s, sizeof port_s, "%d", port);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  rc = getaddrinfo(host[0] ? host : NULL, port_s, &hints, &ai);
  if (rc != 0) {
    snprintf(err, errlen, "cannot resolve --http host '%s': %s", host, gai_strerror(rc));
    return -1;
  }
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 512) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", listen_addr, strerror(errno));
    if (fd >= 0) close(fd);
    fd = -1;
    goto exit;
  }
  if (ss.ss_family == AF_INET6) {
    char a[INET6_ADDRSTRLEN];
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof a);
    snprintf(api->address, sizeof api->address, "[%s]:%d", a, ntohs(s6->sin6_port));
  } else {
    char a[INET_ADDRSTRLEN];
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a);
    snprintf(api->address, sizeof api->address, "%s:%d", a, ntohs(s4->sin_port));
  }
exit:
  freeaddrinfo(ai);
  return fd;
}

unsigned rm__http_fd_budget(unsigned want)
{
  struct rlimit rl;
  rlim_t was, reserve;
  unsigned got = want;

  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    RM_WARN("api: cannot read RLIMIT_NOFILE: %s", strerror(errno));
    return want;
  }
  was = rl.rlim_cur;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      RM_WARN("api: cannot raise RLIMIT_NOFILE to %llu: %s", (unsigned long long)rl.rlim_max,
              strerror(errno));
      rl.rlim_cur = was;
    }
  }
  reserve = rl.rlim_cur / 4 < RM__FD_RESERVE ? rl.rlim_cur / 4 : RM__FD_RESERVE;
  if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)want + reserve > rl.rlim_cur) {
    got = rl.rlim_cur > reserve + 4 ? (unsigned)(rl.rlim_cur - reserve) : 4;
    RM_WARN("api: file descriptor limit %llu (hard %llu) leaves room for %u HTTP connections, "
            "not the %u asked (RINGMASTER_HTTP_MAX_CONNECTIONS); raise `ulimit -Hn`",
            (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, got, want);
  }
  if (rl.rlim_cur == RLIM_INFINITY)
    RM_INFO("api: file descriptor limit unlimited");
  else
    RM_INFO("api: file descriptor limit %llu (was %llu, hard %llu)",
            (unsigned long long)rl.rlim_cur, (unsigned long long)was,
            (unsigned long long)rl.rlim_max);
  return got;
}
