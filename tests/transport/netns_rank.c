/*
 * netns_rank.c - one rank of a world spread over network namespaces
 * (tests/transport/test_hier_netns.py): the hosts of a hierarchical
 * all-reduce, simulated on one machine.
 *
 *   netns_rank RANK WORLD DIR BIND_IP
 *
 * Rendezvous through files: the rank opens its endpoint on BIND_IP:0 and
 * writes "ADDRESS\nOFFER\n" to DIR/RANK.tmp, renamed to DIR/RANK; then it
 * waits (30 s at most) for every rank's file and builds the communicator
 * with every address and offer. It prints one line per peer, "rank R peer
 * P TRANSPORT", and runs, for counts {1, 1000, 2^18+3, 2^22} and every
 * algorithm (ring, hd, butterfly, tree, hierarchical, auto), an in-place
 * f32 sum and an i32 max whose exact results it checks element by element.
 * Exit 0 when every result is exact; the failures are printed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringmaster/ringmaster.h"

#define MAXW 16

static int read_file(const char *path, char *addr, size_t an, char *offer, size_t on)
{
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fgets(addr, (int)an, f) && fgets(offer, (int)on, f);
  fclose(f);
  if (!ok) return -1;
  addr[strcspn(addr, "\n")] = 0;
  offer[strcspn(offer, "\n")] = 0;
  return 0;
}

int main(int argc, char **argv)
{
  if (argc != 5) {
    fprintf(stderr, "usage: netns_rank RANK WORLD DIR BIND_IP\n");
    return 2;
  }
  int rank = atoi(argv[1]), world = atoi(argv[2]), bad = 0;
  const char *dir = argv[3];
  char bind[128], path[512], tmp[520];
  static char addr[MAXW][160], offer[MAXW][256];
  const char *peers[MAXW], *offers[MAXW];
  rm_endpoint_t *ep = NULL;
  if (world < 1 || world > MAXW || rank < 0 || rank >= world) return 2;
  snprintf(bind, sizeof bind, "%s:0", argv[4]);
  if (rm_endpoint_open(bind, &ep) != RM_OK) {
    fprintf(stderr, "rank %d: cannot listen on %s\n", rank, bind);
    return 1;
  }
  snprintf(path, sizeof path, "%s/%d", dir, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return 1;
  fprintf(f, "%s\n%s\n", rm_endpoint_address(ep), rm_endpoint_transports(ep));
  fclose(f);
  if (rename(tmp, path) != 0) return 1;
  for (int r = 0; r < world; r++) {
    snprintf(path, sizeof path, "%s/%d", dir, r);
    for (int tries = 0; read_file(path, addr[r], sizeof addr[r], offer[r], sizeof offer[r]); tries++) {
      if (tries > 3000) {
        fprintf(stderr, "rank %d: no rendezvous file from rank %d\n", rank, r);
        return 1;
      }
      usleep(10000);
    }
    peers[r] = addr[r];
    offers[r] = offer[r];
  }
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_comm_config_init(&cfg);
  cfg.job_id = 7;
  cfg.generation = 1;
  cfg.rank = rank;
  cfg.world = world;
  cfg.peers = peers;
  cfg.transports = offers;
  cfg.endpoint = ep;
  cfg.timeout_ms = 30000;
  cfg.connect_timeout_ms = 30000;
  rm_status_t st = rm_comm_init(&cfg, &c);
  if (st != RM_OK) {
    fprintf(stderr, "rank %d: rm_comm_init: %s\n", rank, rm_status_name(st));
    return 1;
  }
  for (int p = 0; p < world; p++)
    if (p != rank) printf("rank %d peer %d %s\n", rank, p, rm_comm_transport(c, p));
  static const size_t counts[] = {1, 1000, (1u << 18) + 3, 1u << 22};
  static const rm_algo_t algos[] = {RM_ALGO_RING, RM_ALGO_HALVING_DOUBLING, RM_ALGO_BUTTERFLY,
                                    RM_ALGO_TREE, RM_ALGO_HIERARCHICAL, RM_ALGO_AUTO};
  float *fb = malloc(((size_t)1 << 22) * sizeof *fb);
  int32_t *ib = malloc(((size_t)1 << 22) * sizeof *ib);
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && st == RM_OK; ci++) {
    size_t n = counts[ci];
    for (size_t ai = 0; ai < sizeof algos / sizeof algos[0] && st == RM_OK; ai++) {
      rm_allreduce_info_t info;
      for (size_t i = 0; i < n; i++) {
        fb[i] = (float)((i % 512) + (size_t)rank);         /* exact in f32 */
        ib[i] = (int32_t)((i * 7 + (size_t)rank * 13) % 1000);
      }
      st = rm_allreduce_ex(c, fb, fb, n, RM_F32, RM_SUM, algos[ai], &info);
      if (st == RM_OK) st = rm_allreduce_ex(c, ib, ib, n, RM_I32, RM_MAX, algos[ai], NULL);
      if (st != RM_OK) break;
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) {
        float want = (float)((i % 512) * (size_t)world + (size_t)world * (world - 1) / 2);
        int32_t m = 0;
        for (int r = 0; r < world; r++) {
          int32_t v = (int32_t)((i * 7 + (size_t)r * 13) % 1000);
          if (v > m) m = v;
        }
        wrong += fb[i] != want || ib[i] != m;
      }
      if (wrong) {
        fprintf(stderr, "rank %d: %s count %zu: %zu wrong elements\n", rank,
                rm_algo_name(algos[ai]), n, wrong);
        bad++;
      }
      if (rank == 0)
        printf("count %zu algo %s ran %s: %s\n", n, rm_algo_name(algos[ai]),
               rm_algo_name(info.algorithm), wrong ? "WRONG" : "exact");
    }
  }
  if (st != RM_OK) {
    fprintf(stderr, "rank %d: all-reduce failed: %s: %s\n", rank, rm_status_name(st),
            rm_comm_last_error(c));
    bad++;
  }
  fflush(stdout);
  rm_comm_destroy(c);
  rm_endpoint_close(ep);
  free(fb);
  free(ib);
  return bad ? 1 : 0;
}
