/*
 * store_int.h - the store's insides (module-private): the SQLite
 * connection, its statement cache, the in-memory job counts, and the
 * migrations table the build generates (embed_migrations.cmake).
 */
#ifndef RM_COORDINATOR_STORE_INT_H
#define RM_COORDINATOR_STORE_INT_H

#include <sqlite3.h>
#include <string.h>

#include "store/store.h"

#define RM__STMT_CACHE 64

struct rm__store {
  sqlite3 *db;
  int in_txn;
  /* prepared statements, keyed by the address of their SQL text (each call
   * site passes a string literal), prepared once with
   * SQLITE_PREPARE_PERSISTENT and reset after each use */
  struct { const char *sql; sqlite3_stmt *st; } stmts[RM__STMT_CACHE];
  int nstmts;
  /* rows of the jobs table by state, kept in step with every INSERT/UPDATE
   * of a job's state (rm__job_t.stored_state), so the job list's total and
   * /metrics need no count(*) */
  uint64_t job_counts[RM_JOB_STATE_COUNT];
  /* K of store_key.c: seals the job tokens (the key file <db>.key) */
  unsigned char key[32];
  /* WRITE FAILURES (store.c): the first failing code of the open
   * transaction (0: none), its write steps, the ids of the jobs it
   * inserted (so the core can drop them when it rolls back) */
  int txn_rc;
  int txn_errno;                /* the system's errno behind txn_rc, 0 none */
  size_t txn_writes;
  uint64_t *txn_new;
  size_t ntxn_new, captxn_new;
  /* ... and of the loaded jobs whose rows it changed (rm__store_touch) */
  uint64_t *txn_touched;
  size_t ntxn_touched, captxn_touched;
  /* the store's state: 0 writes succeed, else the code of the last failed
   * commit and its words; commits that failed since open */
  int fail_rc;
  char fail_why[200];
  uint64_t failed_commits;
  int lock_fd;                  /* ONE COORDINATOR PER DATABASE (store.c) */
  char *path;                   /* the database file (rm__store_probe) */
};

/* The cached prepared statement for sql, which MUST be a string literal (the
 * cache is keyed by its address); prepared on first use, aborts on a bad
 * SQL text (a bug). Bind, step, then rm__stmt_done. Never two uses of the
 * same text at once (no caller nests them). */
sqlite3_stmt *rm__stmt(rm__store_t *c, const char *sql);
/* Reset and clear the bindings of a statement from rm__stmt. */
void rm__stmt_done(rm__store_t *c, sqlite3_stmt *st);
/* Step once (an INSERT/UPDATE/BEGIN/COMMIT), log a failure, then done.
 * Returns the sqlite3_step code. */
int rm__stmt_run(rm__store_t *c, sqlite3_stmt *st);
int rm__store_exec(rm__store_t *c, const char *sql); /* 0 ok */
/* Note that the open transaction changes rows of job id (store.c WRITE
 * FAILURES: the core reloads such a job when the transaction fails). */
void rm__store_touch(rm__store_t *c, uint64_t id);
/* Recount job_counts from the jobs table (open, and after a ROLLBACK). */
void rm__store_count_jobs(rm__store_t *c);

/* ---- job tokens at rest (store_key.c) ---- */
#define RM__SALT_HEX 32        /* token_salt: 16 random bytes, hex */
#define RM__TOKEN_SEAL_MAX 71  /* longest token sealed (rm_job_info_t.token) */
/* Load (or create) K from "<db_path>.key", refuse a bad or foreign one, then
 * seal any plaintext token left by a database older than migration 0010.
 * 0, or -1 with a sentence in err. */
int rm__store_key_open(rm__store_t *c, const char *db_path, char *err, size_t errlen);
/* Seal token with a fresh random salt: OUT salt (hex), sealed (hex, 2 *
 * strlen(token) + 1 bytes at least). */
void rm__store_seal(const rm__store_t *c, const char *token, char salt[RM__SALT_HEX + 1],
                    char *sealed, size_t sealed_len);
/* The token back into out, checked against verifier; 0, or -1 (wrong key,
 * edited row, nothing sealed) with out "". */
int rm__store_unseal(const rm__store_t *c, const char *salt, const char *sealed,
                     const char *verifier, char *out, size_t outlen);

/* Seal the packed env list in[0..n): OUT salt, sealed (2 * n + 1 bytes
 * at least, hex), mac (store_key.c ENV). */
void rm__store_env_seal(const rm__store_t *c, const char *in, size_t n,
                        char salt[RM__SALT_HEX + 1], char *sealed,
                        char mac[RM__VERIFIER_HEX + 1]);
/* The packed list back into out[outlen]: its length, or -1 (wrong key,
 * edited row, too long). */
long rm__store_env_unseal(const rm__store_t *c, const char *salt, const char *sealed,
                          const char *mac, char *out, size_t outlen);

/* The generated migrations table (migrations/NNNN_*.sql, in order). */
struct rm__migration {
  const char *name;
  const char *sql;
};
extern const struct rm__migration rm__migrations[];
extern const int rm__migration_count;

/* Truncating copy of a text column (a job row has ~10 text columns and the
 * job list reads 100 rows per page: memcpy, not snprintf's format
 * machinery). */
static inline void rm__copy_text(char *dst, size_t len, const unsigned char *s)
{
  size_t n = s ? strnlen((const char *)s, len - 1) : 0;
  if (n) memcpy(dst, s, n);
  dst[n] = '\0';
}
/* Add id to the set ids[0..n) (no duplicates), growing it. */
void rm__store_id_add(uint64_t **ids, size_t *n, size_t *cap, uint64_t id);

#endif
