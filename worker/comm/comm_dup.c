/*
 * comm_dup.c - rm_comm_dup: a new communicator over a communicator's ranks,
 * for the traffic that cannot share its lanes (tagged point-to-point,
 * comm/p2p.c).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"
#include "rm_check.h"

/* ---- rm_comm_dup ----
 * Collective over comm: each rank opens a new endpoint on its own host
 * (port 0), the ranks all-gather the new addresses and transport offers
 * over comm (their lengths first, then padded strings), and rm_comm_init
 * connects them with comm's job, generation, key and deadline. */
/* The new endpoint's offer with the shared-memory host token of the
 * parent's own offer ("shm:<host>/<nonce>", common/rm_transports.h): the
 * duplicate pairs ranks the way the parent did, also where a launcher
 * named the hosts itself. */
static void keep_host(char *out, size_t n, const char *offer, const char *parent)
{
  const char *s = strstr(offer, "shm:"), *e = s ? strchr(s, '/') : NULL;
  const char *ps = strstr(parent, "shm:"), *pe = ps ? strchr(ps, '/') : NULL;
  if (!s || !e || !ps || !pe) {
    snprintf(out, n, "%s", offer);
    return;
  }
  snprintf(out, n, "%.*s%.*s%s", (int)(s - offer), offer, (int)(pe - ps), ps, e);
}

rm_status_t rm_comm_dup(rm_comm_t *comm, rm_comm_t **out)
{
  rm_endpoint_t *ep = NULL;
  char host[300], *all = NULL;
  char **peers = NULL, **offers = NULL;
  rm_status_t st;
  if (comm == NULL || out == NULL) return RM_ERR_INVALID_ARG;
  *out = NULL;
  int n = comm->world, r = comm->rank;
  const char *me = comm->peers[r], *colon = strrchr(me, ':');
  size_t hl = colon ? (size_t)(colon - me) : strlen(me);
  if (hl >= sizeof host - 3) return RM_ERR_INVALID_ARG;
  memcpy(host, me, hl);
  snprintf(host + hl, sizeof host - hl, ":0");
  if (n > 1) RM_CHECK(rm_endpoint_open(host, &ep));
  const char *addr = ep ? rm_endpoint_address(ep) : me;
  char offer[1024];
  keep_host(offer, sizeof offer, ep ? rm_endpoint_transports(ep) : "tcp", comm->offers[r]);
  int32_t len[2] = {(int32_t)strlen(addr) + 1, (int32_t)strlen(offer) + 1}, *lens = NULL;
  lens = calloc((size_t)n * 2, sizeof *lens);
  peers = calloc((size_t)n, sizeof *peers);
  offers = calloc((size_t)n, sizeof *offers);
  st = lens && peers && offers ? RM_OK : RM_ERR_NOMEM;
  if (st == RM_OK) st = rm_allgather(comm, len, lens, 2, RM_I32);
  size_t w = 0;
  for (int i = 0; st == RM_OK && i < n; i++) {
    size_t k = (size_t)lens[2 * i] + (size_t)lens[2 * i + 1];
    if (lens[2 * i] < 1 || lens[2 * i + 1] < 1 || k > 65536) st = RM_ERR_PROTOCOL;
    if (k > w) w = k;
  }
  if (st == RM_OK && (all = calloc((size_t)n + 1, w)) == NULL) st = RM_ERR_NOMEM;
  if (st == RM_OK) {
    char *mine = all + (size_t)n * w;
    memcpy(mine, addr, (size_t)len[0]);
    memcpy(mine + len[0], offer, (size_t)len[1]);
    st = rm_allgather(comm, mine, all, w, RM_U8);
  }
  for (int i = 0; st == RM_OK && i < n; i++) {
    peers[i] = all + (size_t)i * w;
    offers[i] = peers[i] + lens[2 * i];
    peers[i][lens[2 * i] - 1] = offers[i][lens[2 * i + 1] - 1] = '\0';
  }
  if (st == RM_OK) {
    rm_comm_config_t cfg;
    rm_comm_config_init(&cfg);
    cfg.job_id = comm->job_id;
    cfg.generation = comm->generation;
    cfg.rank = r;
    cfg.world = n;
    cfg.peers = (const char *const *)peers;
    cfg.transports = (const char *const *)offers;
    cfg.endpoint = ep;
    cfg.timeout_ms = comm->timeout_ms;
    cfg.connect_timeout_ms = comm->connect_timeout_ms;
    cfg.algorithm = comm->algorithm;
    cfg.data_key = comm->keyed ? comm->data_key : NULL;
    st = rm_comm_init(&cfg, out);
    if (st == RM_OK) {
      (*out)->owns_endpoint = ep != NULL;
      ep = NULL;
    }
  }
  if (ep) rm_endpoint_close(ep);
  free(all);
  free(lens);
  free(peers);
  free(offers);
  return st;
}
