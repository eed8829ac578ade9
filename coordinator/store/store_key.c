/*
 * store_key.c - job (worker) tokens at rest: what the jobs table holds
 * instead of a token, and the key that makes the token recoverable.
 *
 * THREAT. Whoever reads the SQLite file (a backup, a copied volume, a
 * world-readable data directory) must not learn any job's worker token, or
 * they could impersonate every worker of every running job.
 *
 * WHAT IS STORED, per job row (migrations/0010_token_verifier.sql):
 *
 *   column          bytes  content
 *   token           0      always '' (the plaintext column of 0001, emptied)
 *   token_salt      32     hex of 16 random bytes, new for every token
 *   token_sealed    2*len  hex of token XOR pad(K, salt), len = strlen(token)
 *   token_verifier  64     hex of SHA-256(token)
 *
 *   pad(K, salt) = HMAC-SHA-256(K, "ringmaster job token seal" || 0x00 ||
 *                  salt || counter), counter a byte 0, 1, 2 ..., blocks
 *                  concatenated to the token's length.
 *
 * K is 32 random bytes in the KEY FILE "<db>.key" next to the database,
 * created mode 0600 (O_EXCL, getrandom) on the first start and read on every
 * later one. A key file with any group/other permission bit, not exactly 32
 * bytes long, or not a regular file is refused with a sentence naming it.
 * An in-memory database (":memory:", "") keeps a random K in memory only.
 *
 * INVARIANTS
 *  1. A row's token is recoverable iff K is at hand: unseal(K, salt, sealed)
 *     is the token and SHA-256 of it equals token_verifier. The file alone
 *     (without K) holds a one-time pad's ciphertext (a fresh salt per token,
 *     so no pad is ever used twice) and a hash of a 192-bit random value:
 *     neither reveals the token.
 *  2. Verification never needs K: a worker's presented token is hashed and
 *     compared with token_verifier in constant time (rpc.c check_job,
 *     rm__ct_streq over two 64-hex-digit strings; the hash hides how the
 *     presented token differs). One SHA-256 per worker call.
 *  3. The coordinator still hands the token out after a restart: the store
 *     unseals it when it reads one job (rm__store_job_get: the launcher's
 *     relaunch, the admin's GET, k8s manifests). The job list does not
 *     (its rows carry verifier only, token "").
 *  4. A key that does not open the database is refused at start (one sealed
 *     row is unsealed and checked against its verifier), as is a missing key
 *     file next to a database that already holds sealed tokens: a new random
 *     key would silently make every running job unrecoverable.
 *
 * Why seal rather than derive (token = HMAC(K, salt)): the token is minted
 * in core/public.c from /dev/urandom, and rows written before migration 0010
 * hold tokens that no K derives; sealing treats both the same way, so
 * migrated running jobs keep working, relaunch included. The SWEEP
 * (rm__store_key_open, after the migrations) seals every row whose token
 * column is still non-empty and empties it, with PRAGMA secure_delete on so
 * the freed cell bytes are zeroed, then checkpoints the WAL with TRUNCATE so
 * no old frame with the plaintext stays in <db>-wal.
 *
 * ENV. A job's env values (the user's HF_TOKEN, WANDB_API_KEY ...) are
 * sealed the same way (migrations/0013_env_sealed.sql):
 *
 *   column      content
 *   env         the packed list with every value "***" (keys stay readable)
 *   env_salt    hex of 16 random bytes, new for every job
 *   env_sealed  hex of list XOR pad'(K, env_salt), the whole packed
 *               "KEY=VALUE\0..." list; pad' is pad with the label
 *               "ringmaster job env seal", so no token pad is ever reused
 *   env_mac     hex HMAC-SHA-256(K, "ringmaster job env mac" || 0 ||
 *               env_salt || 0 || env_sealed): a wrong key or an edited row
 *               unseals to nothing rather than to garbage
 *
 * rm__store_job_get unseals the list (the loaded job needs it for the
 * agents' Attach); the job list reads the masked column only. The SWEEP
 * seals rows written before 0013 in the same transaction as the tokens.
 *
 * Crypto: OpenSSL libcrypto (EVP SHA-256, HMAC), which rm_coord already links
 * through gRPC (pkg-config grpc: -lssl -lcrypto; Debian libssl-dev comes
 * with libgrpc-dev).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "store/store_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

static const char SEAL_LABEL[] = "ringmaster job token seal";
static const char ENV_LABEL[] = "ringmaster job env seal";
static const char ENV_MAC_LABEL[] = "ringmaster job env mac";

static void to_hex(const unsigned char *b, size_t n, char *out)
{
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[b[i] >> 4];
    out[2 * i + 1] = d[b[i] & 15];
  }
  out[2 * n] = '\0';
}

static int hexval(int ch)
{
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

/* out[i] = pad[i] ^ the byte of hex digits 2i, 2i+1 of sealed, i < n: 0,
 * or -1 at the first character that is not a hex digit. */
static int unseal_hex(const unsigned char *pad, const char *sealed, size_t n, char *out)
{
  for (size_t i = 0; i < n; i++) {
    int hi = hexval(sealed[2 * i]), lo = hexval(sealed[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (char)(pad[i] ^ (unsigned char)(hi << 4 | lo));
  }
  return 0;
}

/* SHA-256 fetched once: OpenSSL 3's SHA256() looks the algorithm up on
 * every call, about 4x the cost of the digest itself for a 48-byte token. */
static const EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
#endif
  if (!sha256_md) sha256_md = EVP_sha256();
}

void rm__store_verifier(const char *token, char out[RM__VERIFIER_HEX + 1])
{
  unsigned char h[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  pthread_once(&sha256_once, sha256_fetch);
  if (!EVP_Digest(token, strlen(token), h, &n, sha256_md, NULL) || n != 32) {
    RM_ERROR("SHA-256 failed in libcrypto");
    abort(); /* no verifier is safe to make up */
  }
  to_hex(h, n, out);
}

/* out[0..n) = pad(K, salt) (the header's formula), label SEAL_LABEL for
 * tokens, ENV_LABEL for env lists, so the two never share a pad. */
static void pad_label(const rm__store_t *c, const char *label, const char *salt,
                      unsigned char *out, size_t n)
{
  unsigned char msg[64 + RM__SALT_HEX + 1], blk[SHA256_DIGEST_LENGTH];
  size_t ll = strlen(label) + 1, sl = strlen(salt), ml = ll + sl + 1; /* label, NUL, salt, ctr */
  unsigned int bl = 0;
  memcpy(msg, label, ll);
  memcpy(msg + ll, salt, sl);
  for (unsigned ctr = 0, at = 0; at < n; ctr++) {
    msg[ml - 1] = (unsigned char)ctr;
    HMAC(EVP_sha256(), c->key, (int)sizeof c->key, msg, ml, blk, &bl);
    for (unsigned i = 0; i < bl && at < n; i++) out[at++] = blk[i];
  }
  OPENSSL_cleanse(blk, sizeof blk);
}

static void pad(const rm__store_t *c, const char *salt, unsigned char *out, size_t n)
{
  pad_label(c, SEAL_LABEL, salt, out, n);
}

void rm__store_seal(const rm__store_t *c, const char *token, char salt[RM__SALT_HEX + 1],
                    char *sealed, size_t sealed_len)
{
  unsigned char raw[RM__SALT_HEX / 2], p[RM__TOKEN_SEAL_MAX];
  size_t n = strlen(token);
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    RM_ERROR("getrandom failed for a token salt: %s", strerror(errno));
    abort(); /* the daemon may abort (conventions 6 in docs/architecture.md); no weak salt */
  }
  to_hex(raw, sizeof raw, salt);
  if (n > sizeof p || 2 * n + 1 > sealed_len) n = 0; /* never: tokens are 48 hex */
  pad(c, salt, p, n);
  for (size_t i = 0; i < n; i++) p[i] ^= (unsigned char)token[i];
  to_hex(p, n, sealed);
  OPENSSL_cleanse(p, sizeof p);
}

int rm__store_unseal(const rm__store_t *c, const char *salt, const char *sealed,
                     const char *verifier, char *out, size_t outlen)
{
  unsigned char p[RM__TOKEN_SEAL_MAX];
  char v[RM__VERIFIER_HEX + 1];
  size_t hl = strlen(sealed), n = hl / 2;
  if (hl % 2 || n == 0 || n > sizeof p || n >= outlen || strlen(salt) != RM__SALT_HEX)
    return -1;
  pad(c, salt, p, n);
  if (unseal_hex(p, sealed, n, out)) {
    OPENSSL_cleanse(p, sizeof p);
    return -1;
  }
  out[n] = '\0';
  OPENSSL_cleanse(p, sizeof p);
  rm__store_verifier(out, v);
  if (strcmp(v, verifier) != 0) { /* a wrong key or an edited row */
    OPENSSL_cleanse(out, outlen);
    out[0] = '\0';
    return -1;
  }
  return 0;
}

/* ---- env lists (the header's ENV) ---- */
static void random_salt(char salt[RM__SALT_HEX + 1])
{
  unsigned char raw[RM__SALT_HEX / 2];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    RM_ERROR("getrandom failed for a seal salt: %s", strerror(errno));
    abort(); /* no weak salt */
  }
  to_hex(raw, sizeof raw, salt);
}

/* mac = hex HMAC(K, ENV_MAC_LABEL || 0 || salt || 0 || sealed hex) */
static void env_mac(const rm__store_t *c, const char *salt, const char *sealed,
                    char mac[RM__VERIFIER_HEX + 1])
{
  unsigned char h[EVP_MAX_MD_SIZE];
  unsigned int hl = 0;
  size_t sl = strlen(salt) + 1, xl = strlen(sealed), ml = sizeof ENV_MAC_LABEL + sl + xl;
  unsigned char *msg = rm__xmalloc(ml);
  memcpy(msg, ENV_MAC_LABEL, sizeof ENV_MAC_LABEL);
  memcpy(msg + sizeof ENV_MAC_LABEL, salt, sl);
  memcpy(msg + sizeof ENV_MAC_LABEL + sl, sealed, xl);
  if (!HMAC(EVP_sha256(), c->key, (int)sizeof c->key, msg, ml, h, &hl) || hl != 32) {
    RM_ERROR("HMAC-SHA-256 failed in libcrypto");
    abort(); /* no MAC is safe to make up */
  }
  free(msg);
  to_hex(h, hl, mac);
}

void rm__store_env_seal(const rm__store_t *c, const char *in, size_t n,
                        char salt[RM__SALT_HEX + 1], char *sealed,
                        char mac[RM__VERIFIER_HEX + 1])
{
  unsigned char p[RM_COORD_ENV_BYTES];
  if (n > sizeof p) n = 0; /* never: the spec's env is RM_COORD_ENV_BYTES */
  random_salt(salt);
  pad_label(c, ENV_LABEL, salt, p, n);
  for (size_t i = 0; i < n; i++) p[i] ^= (unsigned char)in[i];
  to_hex(p, n, sealed);
  OPENSSL_cleanse(p, sizeof p);
  env_mac(c, salt, sealed, mac);
}

long rm__store_env_unseal(const rm__store_t *c, const char *salt, const char *sealed,
                          const char *mac, char *out, size_t outlen)
{
  unsigned char p[RM_COORD_ENV_BYTES];
  char want[RM__VERIFIER_HEX + 1];
  size_t hl = strlen(sealed), n = hl / 2;
  if (hl % 2 || n > sizeof p || n > outlen || strlen(salt) != RM__SALT_HEX ||
      strlen(mac) != RM__VERIFIER_HEX)
    return -1;
  env_mac(c, salt, sealed, want);
  if (CRYPTO_memcmp(want, mac, RM__VERIFIER_HEX) != 0) return -1; /* wrong key, edited row */
  pad_label(c, ENV_LABEL, salt, p, n);
  if (unseal_hex(p, sealed, n, out)) {
    OPENSSL_cleanse(p, sizeof p);
    return -1;
  }
  OPENSSL_cleanse(p, sizeof p);
  return (long)n;
}

/* ---- the key file ---- */
static int key_read(rm__store_t *c, const char *kp, int fd, char *err, size_t errlen)
{
  struct stat st;
  ssize_t got;
  if (fstat(fd, &st) != 0) {
    snprintf(err, errlen, "cannot stat key file %s: %s", kp, strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "key file %s is not a regular file", kp);
    return -1;
  }
  if (st.st_mode & 077) {
    snprintf(err, errlen, "key file %s has mode %04o: it must be readable by its owner "
             "only (chmod 600 %s)", kp, (unsigned)(st.st_mode & 07777), kp);
    return -1;
  }
  if (st.st_size != (off_t)sizeof c->key ||
      (got = read(fd, c->key, sizeof c->key)) != (ssize_t)sizeof c->key) {
    snprintf(err, errlen, "key file %s must hold exactly %zu bytes (it has %lld); "
             "it is not a ringmaster key", kp, sizeof c->key, (long long)st.st_size);
    return -1;
  }
  return 0;
}

static int key_create(rm__store_t *c, const char *kp, char *err, size_t errlen)
{
  int fd = open(kp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create key file %s: %s", kp, strerror(errno));
    return -1;
  }
  if (getrandom(c->key, sizeof c->key, 0) != (ssize_t)sizeof c->key ||
      write(fd, c->key, sizeof c->key) != (ssize_t)sizeof c->key || fsync(fd) != 0) {
    snprintf(err, errlen, "cannot write key file %s: %s", kp, strerror(errno));
    close(fd);
    unlink(kp);
    return -1;
  }
  close(fd);
  RM_INFO("created key file %s (job tokens are sealed with it; keep it with the "
          "database and back it up separately)", kp);
  return 0;
}

static int count_sealed(rm__store_t *c)
{
  sqlite3_stmt *st = rm__stmt(c, "SELECT count(*) FROM jobs WHERE token_sealed<>'' "
                              "OR env_sealed<>''");
  int n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  rm__stmt_done(c, st);
  return n;
}

/* Invariant 4: the newest sealed row must open with this key. */
static int key_matches(rm__store_t *c)
{
  sqlite3_stmt *st = rm__stmt(c, "SELECT token_salt,token_sealed,token_verifier FROM jobs "
                              "WHERE token_sealed<>'' ORDER BY id DESC LIMIT 1");
  char tok[RM__TOKEN_SEAL_MAX + 1];
  int ok = 1;
  if (sqlite3_step(st) == SQLITE_ROW)
    ok = rm__store_unseal(c, (const char *)sqlite3_column_text(st, 0),
                          (const char *)sqlite3_column_text(st, 1),
                          (const char *)sqlite3_column_text(st, 2), tok, sizeof tok) == 0;
  rm__stmt_done(c, st);
  OPENSSL_cleanse(tok, sizeof tok);
  return ok;
}

/* The env half of the SWEEP: rows with an env list but nothing sealed
 * (written before migration 0013) get it sealed and the column masked.
 * Inside sweep's transaction. Returns the rows sealed. */
static int sweep_env(rm__store_t *c)
{
  sqlite3_stmt *sel = rm__stmt(c, "SELECT id, env FROM jobs WHERE env_sealed='' "
                               "AND length(env)>0");
  int n = 0;
  while (sqlite3_step(sel) == SQLITE_ROW) {
    char salt[RM__SALT_HEX + 1], sealed[2 * RM_COORD_ENV_BYTES + 1], mac[RM__VERIFIER_HEX + 1];
    char list[RM_COORD_ENV_BYTES], masked[RM_COORD_ENV_BYTES];
    const char *b = sqlite3_column_blob(sel, 1);
    size_t bl = (size_t)sqlite3_column_bytes(sel, 1);
    int count = 0, mc;
    sqlite3_stmt *up = rm__stmt(c, "UPDATE jobs SET env=?2, env_salt=?3, env_sealed=?4, "
                                "env_mac=?5 WHERE id=?1");
    if (bl > sizeof list) bl = 0; /* not one of ours: sealed empty, column masked empty */
    if (bl) memcpy(list, b, bl);
    if (bl && list[bl - 1] != '\0') bl = 0;
    for (size_t k = 0; k < bl; k++) count += list[k] == '\0';
    mc = rm_job_spec_env_mask(list, count, masked, sizeof masked);
    rm__store_env_seal(c, list, bl, salt, sealed, mac);
    sqlite3_bind_int64(up, 1, sqlite3_column_int64(sel, 0));
    sqlite3_bind_blob(up, 2, masked, (int)rm_job_spec_packed_len(masked, sizeof masked, mc),
                      SQLITE_TRANSIENT);
    sqlite3_bind_text(up, 3, salt, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up, 4, sealed, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up, 5, mac, -1, SQLITE_TRANSIENT);
    rm__stmt_run(c, up);
    OPENSSL_cleanse(list, sizeof list);
    n++;
  }
  rm__stmt_done(c, sel);
  return n;
}

/* The SWEEP of the header: rows with a plaintext token (written before
 * migration 0010) are sealed and their token column emptied. */
static int sweep(rm__store_t *c)
{
  sqlite3_stmt *sel = rm__stmt(c, "SELECT id, token FROM jobs WHERE token<>''");
  int n = 0, envs = 0;
  if (rm__store_exec(c, "PRAGMA secure_delete=ON") || rm__store_exec(c, "BEGIN IMMEDIATE"))
    return -1;
  while (sqlite3_step(sel) == SQLITE_ROW) {
    char salt[RM__SALT_HEX + 1], sealed[2 * RM__TOKEN_SEAL_MAX + 1], v[RM__VERIFIER_HEX + 1];
    const char *tok = (const char *)sqlite3_column_text(sel, 1);
    sqlite3_stmt *up = rm__stmt(c, "UPDATE jobs SET token='', token_salt=?2, "
                                "token_sealed=?3, token_verifier=?4 WHERE id=?1");
    if (strlen(tok) > RM__TOKEN_SEAL_MAX) { /* not one of ours: verifier only */
      salt[0] = sealed[0] = '\0';
    } else {
      rm__store_seal(c, tok, salt, sealed, sizeof sealed);
    }
    rm__store_verifier(tok, v);
    sqlite3_bind_int64(up, 1, sqlite3_column_int64(sel, 0));
    sqlite3_bind_text(up, 2, salt, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up, 3, sealed, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(up, 4, v, -1, SQLITE_TRANSIENT);
    rm__stmt_run(c, up);
    n++;
  }
  rm__stmt_done(c, sel);
  envs = sweep_env(c);
  if (rm__store_exec(c, "COMMIT")) {
    rm__store_exec(c, "ROLLBACK");
    return -1;
  }
  rm__store_exec(c, "PRAGMA secure_delete=OFF");
  if (n || envs) rm__store_exec(c, "PRAGMA wal_checkpoint(TRUNCATE)");
  if (n)
    RM_INFO("sealed the plaintext worker tokens of %d job%s stored before migration 0010",
            n, n == 1 ? "" : "s");
  if (envs)
    RM_INFO("sealed the env values of %d job%s stored before migration 0013",
            envs, envs == 1 ? "" : "s");
  return 0;
}

int rm__store_key_open(rm__store_t *c, const char *db_path, char *err, size_t errlen)
{
  int rc = -1, fd;
  if (!db_path[0] || !strcmp(db_path, ":memory:")) { /* the database dies with us */
    if (getrandom(c->key, sizeof c->key, 0) != (ssize_t)sizeof c->key) {
      snprintf(err, errlen, "getrandom: %s", strerror(errno));
      return -1;
    }
    return sweep(c);
  }
  size_t kl = strlen(db_path) + 5;
  char *kp = rm__xmalloc(kl);
  snprintf(kp, kl, "%s.key", db_path);
  fd = open(kp, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    rc = key_read(c, kp, fd, err, errlen);
    close(fd);
  } else if (errno == ENOENT && count_sealed(c) == 0) {
    rc = key_create(c, kp, err, errlen);
  } else if (errno == ENOENT) {
    snprintf(err, errlen, "key file %s is missing, but database %s holds sealed worker "
             "tokens: restore the key file that belongs to this database", kp, db_path);
  } else {
    snprintf(err, errlen, "cannot open key file %s: %s", kp, strerror(errno));
  }
  if (rc == 0 && !key_matches(c)) {
    snprintf(err, errlen, "key file %s does not open the worker tokens sealed in %s: "
             "it belongs to another database", kp, db_path);
    rc = -1;
  }
  if (rc == 0 && sweep(c) != 0) {
    snprintf(err, errlen, "cannot seal the plaintext worker tokens in %s: %s", db_path,
             sqlite3_errmsg(c->db));
    rc = -1;
  }
  if (rc != 0) OPENSSL_cleanse(c->key, sizeof c->key);
  free(kp);
  return rc;
}
