/*
 * test_rdma_emu.c - the verbs table (worker/transport/rdma/ibvwrap.h) over
 * the TEST DOUBLE librm_verbs_emu.so (emu.h), as real processes.
 *
 *   test_rdma_emu CASE EMU_SO
 *
 * The parent sets RINGMASTER_IBVERBS_LIB=EMU_SO, forks the processes of the
 * case (A = role 0, B = role 1, joined by a socketpair made before fork
 * that carries the out-of-band exchange), waits for them and checks that
 * nothing is added to /dev/shm. The parent itself never loads verbs.
 * The error cases live in test_rdma_emu_err.c.
 *
 *   device      one device "emu0", port 1 ACTIVE Ethernet, a GID; the QP
 *               state machine rejects bad transitions / masks / attrs
 *   sizes       WRITE_WITH_IMM of 0, 1 B, 4 KiB (3 SGEs), 1 MiB, 64 MiB:
 *               data byte for byte, guards intact, imm and byte_len
 *   credits     3000 back-to-back writes, 16 receive credits returned by
 *               RDMA WRITE of a counter; mostly unsignaled sends
 *   rkey        wrong rkey / out of bounds -> IBV_WC_REM_ACCESS_ERR, the
 *               target untouched, later WRs flushed
 *   rnr         no receive: waits (rnr_retry 7) or IBV_WC_RNR_RETRY_EXC_ERR
 *   peer_kill   B SIGKILLs itself mid 64 MiB write: A's WRs end with
 *               IBV_WC_RETRY_EXC_ERR / IBV_WC_WR_FLUSH_ERR within 10 s
 *   peer_stop   B SIGSTOPs itself: A's write ends with IBV_WC_RETRY_EXC_ERR
 *               by the ack timeout (>= 0.5 s, < 10 s)
 *   flush       QP -> ERR flushes sends stuck in RNR and posted receives;
 *               the peer's next write fails with IBV_WC_RETRY_EXC_ERR
 *   send        SEND_WITH_IMM into a receive's SGE; a SEND longer than the
 *               receive -> IBV_WC_REM_INV_REQ_ERR / IBV_WC_LOC_LEN_ERR
 *   missing_lib RINGMASTER_IBVERBS_LIB names a missing file / a library
 *               without verbs: rm__ibv_load fails with a why naming it
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "emu_test.h"

/* ---------------- device ---------------- */
void case_device(int role, int fd)
{
  side_t s;
  struct ibv_device_attr da;
  struct ibv_port_attr pa;
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  struct ibv_device **list;
  int n = -1;
  if (side_open(&s, 4096) != 0)
    return;
  CHECK(strcmp(rm__ibv_lib_path(), getenv("RINGMASTER_IBVERBS_LIB")) == 0);
  list = rm__ibv_get_device_list(&n);
  CHECK(n == 1 && strcmp(rm__ibv_get_device_name(list[0]), "emu0") == 0);
  rm__ibv_free_device_list(list);
  CHECK(rm__ibv_query_device(s.ctx, &da) == 0 && da.phys_port_cnt == 1);
  CHECK(rm__ibv_query_port(s.ctx, 1, &pa) == 0);
  CHECKF(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET,
         "state %d link %d", pa.state, pa.link_layer);
  CHECK(s.gid.raw[0] == 0xfe && s.gid.raw[1] == 0x80);
  /* state machine: INIT -> RTS is not a transition; RTR needs its mask */
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  CHECK(rm__ibv_modify_qp(s.qp[0], &a, IBV_QP_STATE) == EINVAL);
  a.qp_state = IBV_QPS_RTR;
  CHECK(rm__ibv_modify_qp(s.qp[0], &a, IBV_QP_STATE | IBV_QP_AV) == EINVAL);
  a.qp_state = IBV_QPS_INIT;
  CHECK(rm__ibv_modify_qp(s.qp[0], &a, IBV_QP_STATE | IBV_QP_TIMEOUT) == EINVAL);
  CHECK(post_write(&s, 0, 1, IBV_WR_RDMA_WRITE, 0, 8, 0, 0, 0, IBV_SEND_SIGNALED) == EINVAL);
  CHECK(rm__ibv_query_qp(s.qp[0], &a, IBV_QP_STATE, &ia) == 0 && a.qp_state == IBV_QPS_INIT);
  /* RoCE: an address vector without a GRH is refused */
  {
    info_t self;
    memset(&self, 0, sizeof self);
    self.qpn[0] = s.qp[1]->qp_num;
    memcpy(self.gid, s.gid.raw, 16);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.ah_attr.port_num = 1; /* is_global 0 */
    CHECK(rm__ibv_modify_qp(s.qp[0], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                             IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                             IBV_QP_MAX_DEST_RD_ATOMIC |
                                             IBV_QP_MIN_RNR_TIMER) == EINVAL);
    CHECK(connect_qp(&s, 0, &self, OPTS_DEFAULT) == 0);
  }
  CHECK(strcmp(rm__ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error") == 0);
  side_close(&s);
  setenv("RM_VERBS_EMU_DEVICES", "0", 1);
  list = rm__ibv_get_device_list(&n);
  CHECK(list && n == 0);
  rm__ibv_free_device_list(list);
}

/* ---------------- sizes ---------------- */
static const uint32_t sizes[] = {0, 1, 4096, MiB, 64 * MiB};
#define NSIZES 5
/* region i of both buffers: offset off_of(i), 64 guard bytes after each */
static size_t off_of(int i)
{
  size_t off = 3; /* odd: unaligned 1-byte write */
  for (int k = 0; k < i; k++)
    off += sizes[k] + 64;
  return off;
}

void case_sizes(int role, int fd)
{
  size_t total = off_of(NSIZES) + 64;
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  char done = 0;
  if (side_open(&s, total) != 0)
    return;
  if (role == 1)
    for (int i = 0; i < NSIZES; i++)
      CHECK(post_recv(&s, 0, 100 + (uint64_t)i) == 0);
  CHECK(exchange(fd, &s, &peer) == 0);
  CHECK(connect_qp(&s, 0, &peer, OPTS_DEFAULT) == 0);
  if (role == 0) {
    int64_t t0;
    for (int i = 0; i < NSIZES; i++)
      fill(s.buf + off_of(i), sizes[i], (uint32_t)i);
    CHECK(ctl_get(fd, &done, 1) == 0); /* B's receives are posted and it is RTS */
    t0 = now_ms();
    for (int i = 0; i < NSIZES; i++) {
      uint64_t raddr = peer.addr + off_of(i);
      if (sizes[i] == 4096) { /* gather from three SGEs */
        struct ibv_sge sg[3] = {{(uintptr_t)s.buf + off_of(i), 1000, s.mr->lkey},
                                {(uintptr_t)s.buf + off_of(i) + 1000, 2000, s.mr->lkey},
                                {(uintptr_t)s.buf + off_of(i) + 3000, 1096, s.mr->lkey}};
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof wr);
        wr.wr_id = (uint64_t)i;
        wr.sg_list = sg;
        wr.num_sge = 3;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm_data = htonl(0xA000u + (uint32_t)i);
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = peer.rkey;
        CHECK(rm__ibv_post_send(s.qp[0], &wr, &bad) == 0);
      } else {
        CHECK(post_write(&s, 0, (uint64_t)i, IBV_WR_RDMA_WRITE_WITH_IMM, off_of(i), sizes[i],
                         raddr, peer.rkey, 0xA000u + (uint32_t)i, IBV_SEND_SIGNALED) == 0);
      }
    }
    for (int i = 0; i < NSIZES; i++) {
      CHECK(wait_cq(s.scq, &wc, 60000) == 1);
      CHECKF(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i &&
                 wc.opcode == IBV_WC_RDMA_WRITE,
             "send %d: %s wr_id %llu", i, rm__ibv_wc_status_str(wc.status),
             (unsigned long long)wc.wr_id);
    }
    printf("sizes: 0 B .. 64 MiB written in %lld ms\n", (long long)(now_ms() - t0));
    CHECK(ctl_get(fd, &done, 1) == 0 && done == 'v');
  } else {
    CHECK(ctl_put(fd, "r", 1) == 0);
    for (int i = 0; i < NSIZES; i++) {
      size_t bad;
      CHECK(wait_cq(s.rcq, &wc, 60000) == 1);
      CHECKF(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
                 (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xA000u + (uint32_t)i &&
                 wc.byte_len == sizes[i] && wc.wr_id == 100 + (uint64_t)i &&
                 wc.qp_num == s.qp[0]->qp_num && wc.src_qp == peer.qpn[0],
             "recv %d: %s imm %x len %u", i, rm__ibv_wc_status_str(wc.status),
             ntohl(wc.imm_data), wc.byte_len);
      bad = verify(s.buf + off_of(i), sizes[i], (uint32_t)i);
      CHECKF(bad == sizes[i], "size %u: byte %zu differs", sizes[i], bad);
      for (int g = 0; g < 64; g++)
        CHECKF(s.buf[off_of(i) + sizes[i] + (size_t)g] == 0xEE, "guard %d of %u", g, sizes[i]);
    }
    CHECK(s.buf[0] == 0xEE && s.buf[1] == 0xEE && s.buf[2] == 0xEE);
    CHECK(ctl_put(fd, "v", 1) == 0);
  }
  side_close(&s);
}

/* ---------------- credits ---------------- */
#define NMSG 3000
#define WIN 16
#define SLOT 4096

void case_credits(int role, int fd)
{
  /* A: WIN source slots, then the credit word B writes (inline). B: WIN
   * target slots. */
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  volatile uint64_t *word;
  char done;
  if (side_open(&s, WIN * SLOT + 64) != 0)
    return;
  word = (volatile uint64_t *)(s.buf + WIN * SLOT);
  *word = 0;
  if (role == 1)
    for (int k = 0; k < WIN; k++)
      CHECK(post_recv(&s, 0, (uint64_t)k) == 0);
  CHECK(exchange(fd, &s, &peer) == 0);
  CHECK(connect_qp(&s, 0, &peer, OPTS_DEFAULT) == 0);
  if (role == 0) {
    int64_t t0 = now_ms(), spin_end;
    int nsig = 0, got = 0;
    for (uint32_t seq = 0; seq < NMSG; seq++) {
      uint32_t len = 1 + (seq * 7919u) % SLOT, slot = seq % WIN;
      unsigned flags = (seq % 8 == 7 || seq == NMSG - 1) ? IBV_SEND_SIGNALED : 0;
      int64_t end = now_ms() + 30000;
      for (int spin = 0; seq - __atomic_load_n(word, __ATOMIC_ACQUIRE) >= WIN && now_ms() < end;
           spin++)
        if (spin > 1000)
          usleep(20);
      CHECKF(seq - *word < WIN, "no credit for message %u", seq);
      fill(s.buf + slot * SLOT, len, seq);
      CHECK(post_write(&s, 0, seq, IBV_WR_RDMA_WRITE_WITH_IMM, slot * SLOT, len,
                       peer.addr + slot * SLOT, peer.rkey, seq, flags) == 0);
      nsig += flags != 0;
      while (rm__ibv_poll_cq(s.scq, 1, &wc) == 1) {
        CHECKF(wc.status == IBV_WC_SUCCESS, "send %llu: %s", (unsigned long long)wc.wr_id,
               rm__ibv_wc_status_str(wc.status));
        got++;
      }
      if (rm_check_failures)
        break;
    }
    spin_end = now_ms() + 30000;
    while (got < nsig && now_ms() < spin_end)
      if (wait_cq(s.scq, &wc, 1000) == 1) {
        CHECK(wc.status == IBV_WC_SUCCESS);
        got++;
      }
    CHECKF(got == nsig, "%d of %d signaled completions", got, nsig);
    while (*word < NMSG && now_ms() < spin_end)
      usleep(100);
    CHECK(*word == NMSG);
    printf("credits: %d writes (window %d) in %lld ms\n", NMSG, WIN,
           (long long)(now_ms() - t0));
    CHECK(ctl_get(fd, &done, 1) == 0);
  } else {
    int nsig = 0, got = 0;
    for (uint32_t seq = 0; seq < NMSG; seq++) {
      uint32_t len = 1 + (seq * 7919u) % SLOT;
      unsigned flags = (seq % 8 == 7 || seq == NMSG - 1) ? IBV_SEND_SIGNALED : 0;
      size_t bad;
      if (wait_cq(s.rcq, &wc, 30000) != 1) {
        CHECKF(0, "no receive completion for message %u", seq);
        break;
      }
      CHECKF(wc.status == IBV_WC_SUCCESS && ntohl(wc.imm_data) == seq && wc.byte_len == len,
             "message %u: %s imm %u len %u", seq, rm__ibv_wc_status_str(wc.status),
             ntohl(wc.imm_data), wc.byte_len);
      bad = verify(s.buf + (seq % WIN) * SLOT, len, seq);
      CHECKF(bad == len, "message %u: byte %zu differs", seq, bad);
      CHECK(post_recv(&s, 0, wc.wr_id) == 0);
      { /* return the credit: an inline write of the count (no lkey) */
        uint64_t count = seq + 1;
        struct ibv_sge sge = {(uintptr_t)&count, sizeof count, 0};
        struct ibv_send_wr wr, *badwr;
        memset(&wr, 0, sizeof wr);
        wr.wr_id = seq;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = flags | IBV_SEND_INLINE;
        wr.wr.rdma.remote_addr = peer.addr + WIN * SLOT;
        wr.wr.rdma.rkey = peer.rkey;
        CHECK(rm__ibv_post_send(s.qp[0], &wr, &badwr) == 0);
      }
      nsig += flags != 0;
      while (rm__ibv_poll_cq(s.scq, 1, &wc) == 1) {
        CHECK(wc.status == IBV_WC_SUCCESS);
        got++;
      }
      if (rm_check_failures)
        break;
    }
    /* the last credit must have landed before the QP goes away */
    while (got < nsig && wait_cq(s.scq, &wc, 10000) == 1) {
      CHECK(wc.status == IBV_WC_SUCCESS);
      got++;
    }
    CHECKF(got == nsig, "%d of %d credit writes completed", got, nsig);
    CHECK(ctl_put(fd, "d", 1) == 0);
  }
  side_close(&s);
}

/* ---------------- missing_lib ---------------- */
void case_missing_lib(int role, int fd)
{
  char why[256] = "", why2[256] = "";
  const char *lib = role == 0 ? "/nonexistent/librm_no_verbs.so.1" : "libc.so.6";
  setenv("RINGMASTER_IBVERBS_LIB", lib, 1);
  CHECK(rm__ibv_load(why, sizeof why) == RM_ERR_UNSUPPORTED);
  if (role == 0)
    CHECKF(strstr(why, lib) && strstr(why, "cannot open shared object file"), "why: %s", why);
  else
    CHECKF(strstr(why, "symbol ibv_get_device_list missing") && strstr(why, lib), "why: %s",
           why);
  CHECK(rm__ibv_load(why2, sizeof why2) == RM_ERR_UNSUPPORTED && strcmp(why, why2) == 0);
  printf("missing_lib: %s\n", why);
}

/* ---------------- driver ---------------- */
static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names in /dev/shm, sorted, one a line. */
static int shm_list(char *out, size_t len)
{
  static char names[1024][256];
  char *ptr[1024];
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  size_t used = 0;
  int n = 0;
  out[0] = '\0';
  if (!d)
    return -1;
  while ((e = readdir(d)) != NULL && n < 1024)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      snprintf(names[n], sizeof names[n], "%s", e->d_name);
      ptr[n] = names[n];
      n++;
    }
  closedir(d);
  qsort(ptr, (size_t)n, sizeof ptr[0], cmp_str);
  for (int i = 0; i < n && used + strlen(ptr[i]) + 2 < len; i++)
    used += (size_t)snprintf(out + used, len - used, "%s\n", ptr[i]);
  return 0;
}

/* The lines of `after` that are not lines of `before` (both from
 * shm_list) into out; returns how many. */
static int shm_added(const char *before, const char *after, char *out, size_t len)
{
  size_t used = 0;
  int n = 0;
  out[0] = '\0';
  for (const char *l = after; *l;) {
    const char *nl = strchr(l, '\n');
    size_t k = nl ? (size_t)(nl - l) : strlen(l);
    int found = 0;
    for (const char *b = before; *b && !found;) {
      const char *bn = strchr(b, '\n');
      size_t bk = bn ? (size_t)(bn - b) : strlen(b);
      found = bk == k && memcmp(b, l, k) == 0;
      b += bk + (bn != NULL);
    }
    if (!found) {
      n++;
      if (used + k + 2 < len)
        used += (size_t)snprintf(out + used, len - used, "%.*s\n", (int)k, l);
    }
    l += k + (nl != NULL);
  }
  return n;
}

int main(int argc, char **argv)
{
  static const struct {
    const char *name;
    void (*fn)(int, int);
    int procs;
  } cases[] = {{"device", case_device, 1},   {"sizes", case_sizes, 2},
               {"credits", case_credits, 2}, {"rkey", case_rkey, 2},
               {"rnr", case_rnr, 2},         {"peer_kill", case_peer_kill, 2},
               {"peer_stop", case_peer_stop, 2},
               {"flush", case_flush, 2},     {"send", case_send, 2},
               {"missing_lib", case_missing_lib, 2}};
  static char before[1 << 16], after[1 << 16], added[1 << 16];
  int sv[2], idx = -1;
  pid_t pid[2];
  if (argc != 3) {
    fprintf(stderr, "usage: %s CASE EMU_SO\n", argv[0]);
    return 2;
  }
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
    if (strcmp(argv[1], cases[i].name) == 0)
      idx = i;
  if (idx < 0) {
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
  }
  setenv("RINGMASTER_IBVERBS_LIB", argv[2], 1);
  signal(SIGPIPE, SIG_IGN);
  CHECK(shm_list(before, sizeof before) == 0);
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  fflush(NULL);
  for (int r = 0; r < cases[idx].procs; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      close(sv[1 - r]);
      alarm(100);
      cases[idx].fn(r, sv[r]);
      fflush(NULL);
      exit(rm_check_failures + err_check_failures() ? 1 : 0);
    }
    CHECK(pid[r] > 0);
  }
  close(sv[0]);
  close(sv[1]);
  for (int r = 0; r < cases[idx].procs; r++) {
    int st = 0;
    int killed_ok = cases[idx].fn == case_peer_kill && r == 1; /* B SIGKILLs itself */
    CHECK(waitpid(pid[r], &st, 0) == pid[r]);
    if (killed_ok)
      CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "B: status %#x", st);
    else
      CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %c: status %#x", 'A' + r, st);
  }
  /* nothing added to /dev/shm. Only names that were not there before
   * count: tests running in parallel create and remove their own, so a
   * name that went away is theirs, and one that appeared may be theirs for
   * a moment (retry before calling it ours). */
  for (int tries = 0; tries < 30; tries++) {
    CHECK(shm_list(after, sizeof after) == 0);
    if (shm_added(before, after, added, sizeof added) == 0 || tries == 29)
      break;
    usleep(100 * 1000);
  }
  CHECKF(added[0] == '\0', "/dev/shm: left behind:\n%s", added);
  return rm_check_exit(argv[1]);
}
