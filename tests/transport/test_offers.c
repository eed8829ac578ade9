/*
 * test_offers.c - common/rm_transports.c on its own (unit): which offers
 * are well formed (rm_tp_offer_valid: what the coordinator accepts in a
 * Join and rm_comm_init in cfg.transports), the pair rule (rm_tp_pick:
 * the lower rank's order, same host for shm, same fabric for rdma, tcp,
 * unknown tokens skipped, nothing in common = NULL) and rm_tp_offer_shm.
 */
#include <string.h>

#include "rm_testcheck.h"
#include "rm_transports.h"

static int valid(const char *offer)
{
  char why[200];
  why[0] = '\0';
  int ok = rm_tp_offer_valid(offer, why, sizeof why);
  if (!ok) CHECKF(why[0] != '\0', "no reason given for \"%s\"", offer);
  return ok;
}

static int same(const char *a, const char *b)
{
  return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

int main(void)
{
  char long_offer[300];
  memset(long_offer, 'a', sizeof long_offer);
  long_offer[255] = '\0';
  CHECK(valid(long_offer)); /* 255 bytes: the limit */
  long_offer[255] = 'a';
  long_offer[256] = '\0';
  CHECK(!valid(long_offer));

  static const char *const good[] = {
      "",
      "tcp",
      "shm:0123abcd/00ff00ff00ff00ff tcp",
      "shm:h/n rdma:fe80.0/10.0.0.1:4000 tcp",
      "rdma:fab_1/1.2.3.4:5 tcp",
      "nvlink:q/1 tcp", /* unknown kind: skipped, not judged */
      "future-token tcp",
      "tcp shm:h/n",
      "shm:h/n cuda:h/ipc1 tcp", /* the CUDA IPC capability */
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    CHECKF(valid(good[i]), "\"%s\" should be accepted", good[i]);

  static const char *const bad[] = {
      "tcp ",        " tcp",          "shm:h/n  tcp", "   ",       "TCP",
      "tcp;x",       "tcp\n",         "shm:h tcp",    "shm:/n tcp", "shm:h/ tcp",
      "rdma:/1.2.3.4:5 tcp", ": tcp", "/x tcp",       "shm:h:x/n tcp", "t\xc3\xa9p",
      "shm:h/n cuda:h tcp", "cuda:/ipc1 tcp", "cuda:h/ tcp",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECKF(!valid(bad[i]), "\"%s\" should be refused", bad[i]);

  static const struct {
    const char *lo, *hi, *want;
  } pairs[] = {
      {"shm:a/1 tcp", "shm:a/2 tcp", "shm"},
      {"shm:a/1 tcp", "shm:b/2 tcp", "tcp"},
      {"tcp shm:a/1", "shm:a/2 tcp", "tcp"},   /* the lower rank's order */
      {"shm:a/2 tcp", "tcp shm:a/1", "shm"},
      {"rdma:f/1.1.1.1:1 tcp", "rdma:f/2.2.2.2:2 tcp", "rdma"},
      {"rdma:f/1.1.1.1:1 tcp", "rdma:g/2.2.2.2:2 tcp", "tcp"},
      {"shm:a/1 rdma:f/x:1 tcp", "shm:b/2 rdma:f/y:2 tcp", "rdma"},
      {"nvlink:q/1 tcp", "nvlink:q/2 tcp", "tcp"}, /* unknown: skipped */
      {"", "shm:a/1 tcp", "tcp"},                  /* an old worker */
      {NULL, NULL, "tcp"},
      {"shm:a/1", "tcp", NULL},                    /* nothing in common */
      {"shm:a/1", "shm:b/2", NULL},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    const char *got = rm_tp_pick(pairs[i].lo, pairs[i].hi);
    CHECKF(same(got, pairs[i].want), "pick(\"%s\", \"%s\") = %s, want %s",
           pairs[i].lo ? pairs[i].lo : "(null)", pairs[i].hi ? pairs[i].hi : "(null)",
           got ? got : "NULL", pairs[i].want ? pairs[i].want : "NULL");
  }

  /* CUDA IPC: shared memory and the same <host> on both sides, never a
   * transport of its own */
  static const struct {
    const char *lo, *hi;
    int want;
  } ipc[] = {
      {"shm:a/1 cuda:a/ipc1 tcp", "shm:a/2 cuda:a/ipc1 tcp", 1},
      {"shm:a/1 tcp", "shm:a/2 cuda:a/ipc1 tcp", 0},        /* one side only */
      {"shm:a/1 cuda:a/ipc1 tcp", "shm:b/2 cuda:b/ipc1 tcp", 0}, /* two hosts */
      {"shm:a/1 cuda:b/ipc1 tcp", "shm:a/2 cuda:b/ipc1 tcp", 0}, /* not the shm host */
      {"tcp shm:a/1 cuda:a/ipc1", "shm:a/2 cuda:a/ipc1 tcp", 0}, /* the pair is tcp */
      {"cuda:a/ipc1 shm:a/1 tcp", "cuda:a/ipc1 shm:a/2 tcp", 1}, /* order: never picked */
      {"shm:a/1 cuda:a/ipc2 tcp", "shm:a/2 cuda:a/ipc1 tcp", 0}, /* another IPC protocol */
  };
  for (size_t i = 0; i < sizeof ipc / sizeof ipc[0]; i++) {
    CHECKF(rm_tp_cuda_ipc(ipc[i].lo, ipc[i].hi) == ipc[i].want, "cuda_ipc(\"%s\", \"%s\") != %d",
           ipc[i].lo, ipc[i].hi, ipc[i].want);
    const char *got = rm_tp_pick(ipc[i].lo, ipc[i].hi);
    CHECKF(got == NULL || strcmp(got, "cuda") != 0, "pick chose the capability");
  }
  CHECK(same(rm_tp_pick("cuda:a/ipc1 shm:a/1 tcp", "cuda:a/ipc1 shm:a/2 tcp"), "shm"));

  char host[64], nonce[64];
  CHECK(rm_tp_offer_shm("rdma:f/x:1 shm:hh/00aa tcp", host, sizeof host, nonce, sizeof nonce));
  CHECK(strcmp(host, "hh") == 0 && strcmp(nonce, "00aa") == 0);
  CHECK(!rm_tp_offer_shm("tcp", host, sizeof host, nonce, sizeof nonce));
  return rm_check_exit("test_offers");
}
