/*
 * test_checkpoint.c - checkpoint files: round trip, every kind of corruption
 * rejected with a clear message, newest-valid lookup, keep-last-K, and a
 * REAL crash between write and rename (a forked writer _exit()s from the
 * test hook) leaving the previous checkpoint valid.
 *
 *   test_checkpoint          everything but the crash
 *   test_checkpoint crash    the crash only; needs the test hooks
 *                            (RINGMASTER_TEST_HOOKS=ON), else exit 77 (skip)
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "rm_testhook.h"

#include "rm_testcheck.h"

static char dir[256];

static rm__ckpt_meta_t meta(uint64_t job, int rank, uint64_t step, uint64_t len)
{
  rm__ckpt_meta_t m = {job, step, 3, rank, 4, len};
  return m;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
}

static int count_files_with(const char *prefix, const char *suffix)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  while (d != NULL && (e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name), sl = strlen(suffix);
    if (l >= sl && strcmp(e->d_name + l - sl, suffix) == 0 &&
        strncmp(e->d_name, prefix, strlen(prefix)) == 0)
      n++;
  }
  if (d != NULL) closedir(d);
  return n;
}

static int count_files(const char *suffix) { return count_files_with("", suffix); }

static void test_crc(void)
{
  CHECK(rm__crc32(0, "123456789", 9) == 0xCBF43926u);
  CHECK(rm__crc32(rm__crc32(0, "1234", 4), "56789", 5) == 0xCBF43926u);
  CHECK(rm__crc32(0, NULL, 0) == 0);
}

static void test_round_trip(void)
{
  size_t n = 1 << 20;
  unsigned char *p = malloc(n);
  char path[512], want[512], err[512] = "";
  rm__ckpt_meta_t m = meta(77, 1, 500, n), got;
  void *back = NULL;
  fill(p, n, 1);
  CHECK(rm__ckpt_write(dir, &m, p, path, sizeof path, err, sizeof err) == RM_OK);
  CHECK(rm__ckpt_path(dir, 77, 1, 500, want, sizeof want) == RM_OK);
  CHECK(strcmp(path, want) == 0);
  CHECK(strstr(path, "ckpt-j77-r1-s00000000000000000500.rmck") != NULL);
  CHECK(count_files(".tmp") == 0);
  CHECK(rm__ckpt_read(path, &got, &back, err, sizeof err) == RM_OK);
  CHECK(back != NULL && memcmp(back, p, n) == 0);
  CHECK(got.job_id == 77 && got.rank == 1 && got.step == 500 &&
        got.generation == 3 && got.world == 4 && got.payload_len == n);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == n + RM__CKPT_HEADER_LEN);
  free(back);
  /* empty payload */
  m = meta(77, 2, 1, 0);
  CHECK(rm__ckpt_write(dir, &m, NULL, path, sizeof path, err, sizeof err) == RM_OK);
  back = (void *)1;
  CHECK(rm__ckpt_read(path, &got, &back, err, sizeof err) == RM_OK);
  CHECK(back == NULL && got.payload_len == 0 && got.rank == 2);
  /* bad arguments */
  m = meta(77, -1, 1, 0);
  CHECK(rm__ckpt_write(dir, &m, NULL, NULL, 0, err, sizeof err) == RM_ERR_INVALID_ARG);
  m = meta(77, 0, 1, 10);
  CHECK(rm__ckpt_write(dir, &m, NULL, NULL, 0, err, sizeof err) == RM_ERR_INVALID_ARG);
  CHECK(rm__ckpt_write("/nonexistent-dir-rm", &m, p, NULL, 0, err, sizeof err) == RM_ERR_NOT_FOUND);
  free(p);
}

/* copy of a valid file, damaged by `how`; returns the read status */
static rm_status_t damaged(const char *src, int how, char *err, size_t errlen)
{
  char bad[512];
  unsigned char buf[4096 + 64 + 1];
  snprintf(bad, sizeof bad, "%s/damaged.bin", dir);
  int in = open(src, O_RDONLY);
  ssize_t n = read(in, buf, 4096 + 64);
  close(in);
  CHECK(n == 4096 + 64);
  switch (how) {
  case 0: buf[64 + 1000] ^= 0x01; break; /* one payload bit */
  case 1: buf[30] ^= 0x80; break;        /* step field in the header */
  case 2: n -= 1; break;                 /* truncated by one byte */
  case 3: n = 10; break;                 /* shorter than the header */
  case 4: buf[n++] = 0; break;           /* trailing byte */
  case 5: buf[0] = 'X'; break;           /* magic */
  case 6: buf[8] = 2; break;             /* version */
  }
  int out = open(bad, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(write(out, buf, (size_t)n) == n);
  close(out);
  rm__ckpt_meta_t m;
  void *payload = (void *)1;
  rm_status_t st = rm__ckpt_read(bad, &m, &payload, err, errlen);
  if (st != RM_OK) CHECK(payload == (void *)1); /* OUT untouched on failure */
  unlink(bad);
  return st;
}

static void test_corruption(void)
{
  unsigned char p[4096];
  char path[512], err[512];
  rm__ckpt_meta_t m = meta(5, 0, 9, sizeof p);
  static const char *want[] = {"payload checksum", "header checksum", "truncated",
                               "truncated", "trailing bytes", "bad magic",
                               "unsupported version"};
  fill(p, sizeof p, 2);
  CHECK(rm__ckpt_write(dir, &m, p, path, sizeof path, err, sizeof err) == RM_OK);
  for (int how = 0; how < 7; how++) {
    err[0] = 0;
    CHECK(damaged(path, how, err, sizeof err) == RM_ERR_INVALID_ARG);
    if (strstr(err, want[how]) == NULL || strstr(err, "damaged.bin") == NULL) {
      fprintf(stderr, "damage %d: unexpected message: %s\n", how, err);
      rm_check_failures++;
    }
  }
  void *payload;
  CHECK(rm__ckpt_read("/nonexistent-rm.rmck", &m, &payload, err, sizeof err) == RM_ERR_NOT_FOUND);
  unlink(path);
}

static void write_step(uint64_t job, int rank, uint64_t step)
{
  unsigned char p[256];
  char err[512];
  rm__ckpt_meta_t m = meta(job, rank, step, sizeof p);
  fill(p, sizeof p, (unsigned)step);
  CHECK(rm__ckpt_write(dir, &m, p, NULL, 0, err, sizeof err) == RM_OK);
}

static void test_latest_and_prune(void)
{
  char path[512], err[512];
  rm__ckpt_meta_t m;
  int removed = -1;
  CHECK(rm__ckpt_latest(dir, 9, 0, path, sizeof path, &m, err, sizeof err) == RM_ERR_NOT_FOUND);
  for (uint64_t s = 10; s <= 50; s += 10) write_step(9, 0, s);
  write_step(9, 1, 70);  /* other rank */
  write_step(10, 0, 90); /* other job */
  CHECK(rm__ckpt_latest(dir, 9, 0, path, sizeof path, &m, err, sizeof err) == RM_OK);
  CHECK(m.step == 50 && m.job_id == 9 && m.rank == 0);
  /* corrupt the newest: latest falls back to the one before */
  int fd = open(path, O_WRONLY);
  CHECK(fd >= 0 && pwrite(fd, "zz", 2, 100) == 2);
  close(fd);
  CHECK(rm__ckpt_latest(dir, 9, 0, path, sizeof path, &m, err, sizeof err) == RM_OK);
  CHECK(m.step == 40);
  CHECK(strstr(path, "s00000000000000000040.rmck") != NULL);
  /* keep the last 2 of job 9 rank 0: 10, 20, 30 go */
  CHECK(rm__ckpt_prune(dir, 9, 0, 2, &removed, err, sizeof err) == RM_OK);
  CHECK(removed == 3);
  CHECK(rm__ckpt_latest(dir, 9, 1, NULL, 0, &m, err, sizeof err) == RM_OK && m.step == 70);
  CHECK(rm__ckpt_latest(dir, 10, 0, NULL, 0, &m, err, sizeof err) == RM_OK && m.step == 90);
  CHECK(count_files_with("ckpt-j9-r0-", ".rmck") == 2); /* 40, 50 (corrupt) */
  CHECK(count_files_with("ckpt-j9-r1-", ".rmck") == 1);
  CHECK(count_files_with("ckpt-j10-r0-", ".rmck") == 1);
  CHECK(rm__ckpt_prune(dir, 9, 0, 0, NULL, err, sizeof err) == RM_ERR_INVALID_ARG);
  CHECK(rm__ckpt_prune(dir, 9, 0, 5, &removed, err, sizeof err) == RM_OK && removed == 0);
}

static void die_before_rename(const char *stage)
{
  if (strcmp(stage, "synced") == 0) _exit(42);
}

/* parameters and momentum in two arrays: gathered write, scattered read */
static void test_iov(void)
{
  float params[300], velocity[300], p2[300], v2[300], small[10];
  char path[512], err[512];
  rm__ckpt_meta_t m = meta(33, 0, 8, 12345 /* ignored */), got;
  for (int i = 0; i < 300; i++) {
    params[i] = (float)i * 0.5f;
    velocity[i] = -(float)i;
  }
  struct iovec w[2] = {{params, sizeof params}, {velocity, sizeof velocity}};
  CHECK(rm__ckpt_writev(dir, &m, w, 2, path, sizeof path, err, sizeof err) == RM_OK);
  struct iovec r[2] = {{p2, sizeof p2}, {v2, sizeof v2}};
  CHECK(rm__ckpt_readv(path, &got, r, 2, err, sizeof err) == RM_OK);
  CHECK(got.payload_len == sizeof params + sizeof velocity && got.step == 8);
  CHECK(memcmp(p2, params, sizeof p2) == 0 && memcmp(v2, velocity, sizeof v2) == 0);
  /* the single-buffer reader sees the same bytes, back to back */
  void *all = NULL;
  CHECK(rm__ckpt_read(path, &got, &all, err, sizeof err) == RM_OK);
  CHECK(all != NULL && memcmp(all, params, sizeof params) == 0 &&
        memcmp((char *)all + sizeof params, velocity, sizeof velocity) == 0);
  free(all);
  /* buffers of the wrong total size are refused with both sizes named */
  struct iovec bad[2] = {{p2, sizeof p2}, {small, sizeof small}};
  got.step = 999;
  CHECK(rm__ckpt_readv(path, &got, bad, 2, err, sizeof err) == RM_ERR_INVALID_ARG);
  CHECK(strstr(err, "2400 bytes") != NULL && strstr(err, "1240") != NULL);
  CHECK(got.step == 999);
  /* a NULL base with a length is an argument error */
  struct iovec nul[1] = {{NULL, 4}};
  CHECK(rm__ckpt_writev(dir, &m, nul, 1, NULL, 0, err, sizeof err) == RM_ERR_INVALID_ARG);
}

static void test_crash_before_rename(void)
{
  char path[512], err[512];
  rm__ckpt_meta_t m;
  int removed = 0;
  write_step(21, 0, 100);
  pid_t pid = fork();
  if (pid == 0) {
    rm__testhook_set_ckpt(die_before_rename);
    write_step(21, 0, 200); /* never returns */
    _exit(0);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 42);
  /* the crashed write left its temp file and no final file */
  CHECK(rm__ckpt_path(dir, 21, 0, 200, path, sizeof path) == RM_OK);
  CHECK(access(path, F_OK) != 0);
  CHECK(count_files(".tmp") == 1);
  /* the previous checkpoint is the latest and reads back valid */
  CHECK(rm__ckpt_latest(dir, 21, 0, path, sizeof path, &m, err, sizeof err) == RM_OK);
  CHECK(m.step == 100);
  void *payload = NULL;
  CHECK(rm__ckpt_read(path, &m, &payload, err, sizeof err) == RM_OK);
  free(payload);
  /* prune clears the leftover temp file */
  CHECK(rm__ckpt_prune(dir, 21, 0, 3, &removed, err, sizeof err) == RM_OK && removed == 1);
  CHECK(count_files(".tmp") == 0);
  /* and a retried write succeeds */
  write_step(21, 0, 200);
  CHECK(rm__ckpt_latest(dir, 21, 0, NULL, 0, &m, err, sizeof err) == RM_OK && m.step == 200);
}

static void cleanup(void)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[600];
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  if (d != NULL) closedir(d);
  rmdir(dir);
}

int main(int argc, char **argv)
{
  int crash = argc > 1 && strcmp(argv[1], "crash") == 0;
  if (crash && !RM_TESTHOOKS) {
    printf("test_checkpoint crash: skipped: built without the test hooks "
           "(configure with -DRINGMASTER_TEST_HOOKS=ON)\n");
    return 77;
  }
  snprintf(dir, sizeof dir, "/tmp/rm-ckpt-test-XXXXXX");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  if (crash) {
    test_crash_before_rename();
  } else {
    test_crc();
    test_round_trip();
    test_corruption();
    test_latest_and_prune();
    test_iov();
  }
  cleanup();
  return rm_check_exit("test_checkpoint");
}
