/*
 * test_token.c - job tokens at rest (coordinator/store/store_key.c), on a
 * temp SQLite file in one process:
 *
 *   - the verifier is hex SHA-256 (FIPS 180-2 vectors "abc" and "");
 *   - seal/unseal round-trips a token; a wrong verifier, an edited sealed
 *     text or another key gives -1 and an empty token; two seals of the
 *     same token differ (fresh salt);
 *   - rm__store_open creates <db>.key (32 bytes, mode 0600); a job inserted
 *     and read back has its token, the row's token column is '' and the
 *     file holds no token bytes; reopening with the same key reads it back;
 *   - env lists: seal/unseal round-trips a packed list; another key, an
 *     edited sealed text or an edited MAC gives -1; a job's env values are
 *     read back by job_get, the job list shows them "***", and neither the
 *     file nor its WAL holds a value; the database and WAL are 0600;
 *   - the cost of one verifier (what every worker call pays) is printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/store_int.h"
#include "rm_alloc.h"

static int fails;
#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);\
      fails++;                                                                \
    }                                                                         \
  } while (0)

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int file_has(const char *path, const char *needle)
{
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = rm__xmalloc((size_t)n + 1);
  size_t got = fread(b, 1, (size_t)n, f), k = strlen(needle);
  fclose(f);
  int hit = 0;
  for (size_t i = 0; i + k <= got && !hit; i++) hit = !memcmp(b + i, needle, k);
  free(b);
  return hit;
}

static void vectors(void)
{
  char v[RM__VERIFIER_HEX + 1];
  rm__store_verifier("abc", v);
  CHECK(!strcmp(v, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  rm__store_verifier("", v);
  CHECK(!strcmp(v, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
}

static void seal_rules(rm__store_t *s, rm__store_t *other)
{
  const char *tok = "00112233445566778899aabbccddeeff0011223344556677";
  char salt[RM__SALT_HEX + 1], salt2[RM__SALT_HEX + 1], sealed[160], sealed2[160];
  char v[RM__VERIFIER_HEX + 1], out[72];
  rm__store_verifier(tok, v);
  rm__store_seal(s, tok, salt, sealed, sizeof sealed);
  rm__store_seal(s, tok, salt2, sealed2, sizeof sealed2);
  CHECK(strlen(salt) == RM__SALT_HEX && strlen(sealed) == 2 * strlen(tok));
  CHECK(strcmp(salt, salt2) && strcmp(sealed, sealed2)); /* fresh salt, fresh pad */
  CHECK(!strstr(sealed, tok));
  CHECK(rm__store_unseal(s, salt, sealed, v, out, sizeof out) == 0 && !strcmp(out, tok));
  CHECK(rm__store_unseal(other, salt, sealed, v, out, sizeof out) == -1 && !out[0]);
  sealed[5] = sealed[5] == '0' ? '1' : '0';
  CHECK(rm__store_unseal(s, salt, sealed, v, out, sizeof out) == -1 && !out[0]);
  sealed[5] = sealed[5] == '0' ? '1' : '0';
  v[0] = v[0] == '0' ? '1' : '0';
  CHECK(rm__store_unseal(s, salt, sealed, v, out, sizeof out) == -1 && !out[0]);
  CHECK(rm__store_unseal(s, "", "", v, out, sizeof out) == -1 && !out[0]);
}

static void env_rules(rm__store_t *s, rm__store_t *other)
{
  static const char list[] = "HF_TOKEN=hf_secret_value\0B=x y\0";
  char salt[RM__SALT_HEX + 1], sealed[2 * sizeof list + 1], mac[RM__VERIFIER_HEX + 1];
  char out[RM_COORD_ENV_BYTES];
  rm__store_env_seal(s, list, sizeof list - 1, salt, sealed, mac);
  CHECK(strlen(sealed) == 2 * (sizeof list - 1) && strlen(mac) == RM__VERIFIER_HEX);
  CHECK(rm__store_env_unseal(s, salt, sealed, mac, out, sizeof out) == (long)sizeof list - 1 &&
        !memcmp(out, list, sizeof list - 1));
  CHECK(rm__store_env_unseal(other, salt, sealed, mac, out, sizeof out) == -1);
  sealed[4] = sealed[4] == '0' ? '1' : '0';
  CHECK(rm__store_env_unseal(s, salt, sealed, mac, out, sizeof out) == -1);
  sealed[4] = sealed[4] == '0' ? '1' : '0';
  mac[0] = mac[0] == '0' ? '1' : '0';
  CHECK(rm__store_env_unseal(s, salt, sealed, mac, out, sizeof out) == -1);
}

static void env_job(rm__store_t *s, const char *db, const char *wal)
{
  static const char secret[] = "hf_SECRET_in_store_test";
  rm__job_t j;
  rm_job_info_t back, *arr = NULL;
  rm_job_filter_t f;
  size_t n = 0, total = 0;
  struct stat st;
  memset(&j, 0, sizeof j);
  memset(&f, 0, sizeof f);
  f.state = -1;
  snprintf(j.info.spec.name, sizeof j.info.spec.name, "e");
  snprintf(j.info.token, sizeof j.info.token, "%s", "0123456789abcdef0123456789abcdef0123456789abcdef");
  CHECK(rm_job_spec_pack(j.info.spec.env, sizeof j.info.spec.env, &j.info.spec.env_count,
                         "HF_TOKEN=hf_SECRET_in_store_test", 32) == 0);
  j.stored_state = -1;
  rm__store_begin(s);
  rm__store_job_insert(s, &j);
  CHECK(rm__store_commit(s) == 0);
  CHECK(rm__store_job_get(s, j.info.id, &back) == RM_OK && back.spec.env_count == 1 &&
        !strcmp(back.spec.env, "HF_TOKEN=hf_SECRET_in_store_test"));
  CHECK(rm__store_job_list(s, &f, &arr, &n, &total) == RM_OK && n >= 1);
  for (size_t i = 0; i < n; i++)
    if (arr[i].id == j.info.id) CHECK(!strcmp(arr[i].spec.env, "HF_TOKEN=***"));
  free(arr);
  CHECK(!file_has(db, secret) && !file_has(wal, secret));
  CHECK(stat(db, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK(stat(wal, &st) == 0 && (st.st_mode & 0777) == 0600);
}

static void bench(void)
{
  const char *tok = "00112233445566778899aabbccddeeff0011223344556677";
  char v[RM__VERIFIER_HEX + 1];
  int n = 200000;
  double t0 = now_s();
  for (int i = 0; i < n; i++) rm__store_verifier(tok, v);
  double t1 = now_s();
  printf("store_token: one verifier (SHA-256 of a 48-byte token, hex) %.0f ns\n",
         (t1 - t0) / n * 1e9);
}

int main(void)
{
  char dir[] = "/tmp/rm-token-XXXXXX", db[96], key[100], wal[100], err[512];
  rm__store_t *s = NULL, *mem = NULL;
  if (!mkdtemp(dir)) return 1;
  snprintf(db, sizeof db, "%s/rm.db", dir);
  snprintf(key, sizeof key, "%s.key", db);
  snprintf(wal, sizeof wal, "%s-wal", db);
  vectors();
  CHECK(rm__store_open(db, &s, err, sizeof err) == RM_OK);
  CHECK(rm__store_open(":memory:", &mem, err, sizeof err) == RM_OK);
  if (!s || !mem) {
    fprintf(stderr, "open: %s\n", err);
    return 1;
  }
  struct stat st;
  CHECK(stat(key, &st) == 0 && st.st_size == 32 && (st.st_mode & 0777) == 0600);
  seal_rules(s, mem);
  env_rules(s, mem);
  env_job(s, db, wal);

  rm__job_t j;
  rm_job_info_t back;
  memset(&j, 0, sizeof j);
  snprintf(j.info.spec.name, sizeof j.info.spec.name, "t");
  snprintf(j.info.token, sizeof j.info.token, "%s", "feedfacecafebeef0123456789abcdef0123456789abcdef");
  j.stored_state = -1;
  rm__store_begin(s);
  rm__store_job_insert(s, &j);
  CHECK(rm__store_commit(s) == 0);
  CHECK(strlen(j.info.token_verifier) == RM__VERIFIER_HEX);
  CHECK(rm__store_job_get(s, j.info.id, &back) == RM_OK && !strcmp(back.token, j.info.token));
  CHECK(!file_has(db, j.info.token) && !file_has(wal, j.info.token));
  rm__store_close(s);
  s = NULL;
  CHECK(rm__store_open(db, &s, err, sizeof err) == RM_OK);
  if (s) {
    CHECK(rm__store_job_get(s, j.info.id, &back) == RM_OK && !strcmp(back.token, j.info.token));
    rm__store_close(s);
  }
  rm__store_close(mem);
  bench();
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
  if (fails) fprintf(stderr, "%d checks failed\n", fails);
  else printf("store_token: ok\n");
  return fails ? 1 : 0;
}
