/*
 * store.c - the coordinator's SQLite persistence.
 *
 * One connection, used only under the coordinator lock. WAL journal with synchronous=NORMAL:
 * a commit is in the WAL file before the post-commit queue sends any
 * answer (core/commit.c), which
 * survives SIGKILL of the coordinator (not power loss; use FULL for that).
 *
 * Migrations (migrations/NNNN_*.sql) are compiled in (embed_migrations.cmake)
 * and applied in order at open: migration i runs iff PRAGMA user_version < i+1,
 * inside one transaction that also sets user_version = i+1, so a crash
 * mid-migration leaves the previous version intact.
 *
 * Tables: jobs (store_jobs.c), workers, generations, barriers, step_summaries,
 * events (store_rows.c; see
 * migrations/0001_initial.sql). A job's worker token is never written: the
 * row holds its verifier and a sealed copy (store_key.c, migration 0010);
 * rm__store_open loads the key file "<db>.key" after the migrations. Memory holds the live view of loaded jobs;
 * these tables are the durable record and the source for finished jobs.
 *
 * Statement cache. Every statement is prepared ONCE per connection
 * (sqlite3_prepare_v3 with SQLITE_PREPARE_PERSISTENT) and kept in c->stmts,
 * keyed by the address of its SQL literal; after each use it is reset and
 * its bindings cleared (rm__stmt_done), so no read transaction stays open
 * and no stale binding leaks into the next use. BEGIN/COMMIT/ROLLBACK
 * (rm__store_begin/commit) go through it too. All are finalized before close.
 *
 * Job counts. c->job_counts[state] = rows of the jobs table in that state,
 * counted once at open and then moved by every write of a job's state
 * (insert: +1; update: -1 old, +1 new, the old one being j->stored_state),
 * so the job list's "total" and /metrics' jobs-by-state cost no count(*)
 * scan of the table. A failed COMMIT (ROLLBACK) recounts from the table.
 *
 * WRITE FAILURES. A write step that fails (SQLITE_FULL, SQLITE_IOERR, ...)
 * marks the open transaction failed (txn_rc): later steps of it are not
 * run, and rm__store_commit rolls it back and returns the code, so the core
 * answers every request of the section with the failure instead of an
 * acknowledgement (core/commit.c). A job row that was not inserted leaves
 * its id 0 and the ids the transaction inserted are listed (txn_new), so
 * the core can drop those jobs from memory: a rolled-back rowid is handed
 * out again by the next INSERT and must never have reached a client. The
 * store stays "failing" (rm__store_failing: full or error, with the words)
 * until a transaction that writes commits again; rm__store_probe makes
 * such a write (readiness checks), so recovery needs no restart. The
 * words are SQLite's and, for an I/O failure, the system's errno behind
 * it ("disk I/O error: Read-only file system": a file system remounted
 * read-only under a running coordinator, a device answering EIO). Only
 * SQLITE_FULL is "full" (507); READONLY, IOERR and the rest are "error"
 * (503). A database this process may not write at all (its mode, owner)
 * is refused at open rather than served read-only.
 *
 * ONE COORDINATOR PER DATABASE. Two coordinators on one file would both
 * write it and each keep its own view of the jobs. rm__store_open takes an
 * exclusive flock on "<db>.lock" (mode 0600, created if absent), before it
 * touches the database, and holds it until rm__store_close; the file says
 * "pid <pid> host <host>" of the holder. A second open fails with those
 * words. The kernel drops a flock with its process, so a lock left by a
 * SIGKILLed coordinator never blocks a restart (the file remains, unlocked,
 * and is simply taken again).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "store/store_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_testhook.h"

sqlite3_stmt *rm__stmt(rm__store_t *c, const char *sql)
{
  sqlite3_stmt *st = NULL;
  for (int i = 0; i < c->nstmts; i++)
    if (c->stmts[i].sql == sql) return c->stmts[i].st;
  if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st,
                         NULL) != SQLITE_OK) {
    RM_ERROR("sqlite prepare failed: %s (%s)", sqlite3_errmsg(c->db), sql);
    abort(); /* a bug in our SQL, not an input problem */
  }
  if (c->nstmts < RM__STMT_CACHE) {
    c->stmts[c->nstmts].sql = sql;
    c->stmts[c->nstmts++].st = st;
  } else {
    RM_WARN("statement cache full (%d): raise RM__STMT_CACHE", RM__STMT_CACHE);
  }
  return st;
}

void rm__stmt_done(rm__store_t *c, sqlite3_stmt *st)
{
  for (int i = 0; i < c->nstmts; i++)
    if (c->stmts[i].st == st) {
      sqlite3_reset(st);
      sqlite3_clear_bindings(st);
      return;
    }
  sqlite3_finalize(st);
}

/* OS FAULTS (test builds). The hook's eio, erofs and enospc kinds fail
 * no step themselves: the step runs, and each write(2) or pwrite(2) SQLite
 * makes during it fails with that errno (SQLite's unix VFS lets a test
 * replace its system calls, xSetSystemCall, as its own I/O-error tests
 * do), so what a failing device, a file system remounted read-only or a
 * full one does to a write is what SQLite itself turns into a code; most
 * steps of a transaction write only its page cache, its COMMIT writes
 * the WAL. Installed once per process, at the first open. */
#ifdef RINGMASTER_TEST_HOOKS
static int os_fail; /* errno for the replaced calls; set only under the coordinator lock */
static sqlite3_syscall_ptr real_write, real_pwrite, real_pwrite64;

static ssize_t fault_write(int fd, const void *b, size_t n)
{
  if (os_fail) return errno = os_fail, -1;
  return ((ssize_t(*)(int, const void *, size_t))real_write)(fd, b, n);
}

static ssize_t fault_pwrite(int fd, const void *b, size_t n, off_t at)
{
  if (os_fail) return errno = os_fail, -1;
  return ((ssize_t(*)(int, const void *, size_t, off_t))real_pwrite)(fd, b, n, at);
}

static ssize_t fault_pwrite64(int fd, const void *b, size_t n, off_t at)
{
  if (os_fail) return errno = os_fail, -1;
  return ((ssize_t(*)(int, const void *, size_t, off_t))real_pwrite64)(fd, b, n, at);
}

static void os_faults_install(void)
{
  static int done;
  sqlite3_vfs *v = sqlite3_vfs_find(NULL);
  if (done || !v || v->iVersion < 3 || !v->xSetSystemCall) return;
  done = 1;
  real_write = v->xGetSystemCall(v, "write");
  real_pwrite = v->xGetSystemCall(v, "pwrite");
  real_pwrite64 = v->xGetSystemCall(v, "pwrite64");
  if (real_write) v->xSetSystemCall(v, "write", (sqlite3_syscall_ptr)fault_write);
  if (real_pwrite) v->xSetSystemCall(v, "pwrite", (sqlite3_syscall_ptr)fault_pwrite);
  if (real_pwrite64) v->xSetSystemCall(v, "pwrite64", (sqlite3_syscall_ptr)fault_pwrite64);
}
#else
static int os_fail;
static void os_faults_install(void) {}
#endif

/* The code the test hook injects in place of this step (test builds:
 * RINGMASTER_TEST_STORE_FAIL, store_hook.c), else 0; for the OS FAULTS
 * kinds 0, with os_fail set for the step. */
static int injected(void)
{
  os_fail = 0;
  switch (rm__testhook_store_step()) {
  case RM__STORE_FAIL_FULL: return SQLITE_FULL;
  case RM__STORE_FAIL_IOERR: return SQLITE_IOERR;
  case RM__STORE_FAIL_READONLY: return SQLITE_READONLY;
  case RM__STORE_FAIL_EIO: os_fail = EIO; return 0;
  case RM__STORE_FAIL_EROFS: os_fail = EROFS; return 0;
  case RM__STORE_FAIL_ENOSPC: os_fail = ENOSPC; return 0;
  default: return 0;
  }
}

/* The system's words behind a failed write (sqlite3_system_errno: EIO,
 * EROFS, ENOSPC, EACCES...), kept with the transaction's code so the
 * answers and the log say "disk I/O error: Read-only file system", not
 * only SQLite's generic words; 0 for a failure that is SQLite's own. */
static int file_errno(sqlite3_file *f)
{
  int e = 0;
  if (f && f->pMethods && f->pMethods->xFileControl &&
      f->pMethods->xFileControl(f, SQLITE_FCNTL_LAST_ERRNO, &e) != SQLITE_OK)
    e = 0;
  return e;
}

static void note_errno(rm__store_t *c, int rc)
{
  sqlite3_file *f = NULL;
  int e = 0;
  switch (rc & 0xff) {
  case SQLITE_IOERR: case SQLITE_FULL: case SQLITE_READONLY: case SQLITE_CANTOPEN:
    break;
  default: return;
  }
  /* the errno the failing write saw is kept by the file that saw it: the
   * WAL (the journal pointer) for a COMMIT, the database file for a read
   * or a checkpoint; sqlite3_system_errno is errno when the error came
   * back up, after other calls may have changed it */
  if (sqlite3_file_control(c->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f) == SQLITE_OK)
    e = file_errno(f);
  if (!e && sqlite3_file_control(c->db, "main", SQLITE_FCNTL_FILE_POINTER, &f) == SQLITE_OK)
    e = file_errno(f);
  if (!e) e = sqlite3_system_errno(c->db);
  if (!c->txn_errno) c->txn_errno = e;
}

int rm__stmt_run(rm__store_t *c, sqlite3_stmt *st)
{
  int rc;
  /* a transaction that already failed writes nothing more: it rolls back
   * at rm__store_commit, so a later step's success would be a lie (and
   * its rowid one that the next transaction hands out again) */
  if (c->in_txn && c->txn_rc) {
    rm__stmt_done(c, st);
    return c->txn_rc;
  }
  rc = injected();
  if (rc) {
    RM_ERROR("sqlite step failed: %s (test hook) (%s)", sqlite3_errstr(rc), sqlite3_sql(st));
  } else {
    rc = sqlite3_step(st);
    os_fail = 0;
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
      note_errno(c, sqlite3_extended_errcode(c->db));
      RM_ERROR("sqlite step failed: %s (%s)", sqlite3_errmsg(c->db), sqlite3_sql(st));
    }
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW && c->in_txn && !c->txn_rc) c->txn_rc = rc;
  if (c->in_txn) c->txn_writes++;
  rm__stmt_done(c, st);
  return rc;
}

int rm__store_exec(rm__store_t *c, const char *sql)
{
  char *msg = NULL;
  int rc = sqlite3_exec(c->db, sql, NULL, NULL, &msg);
  if (rc != SQLITE_OK) {
    RM_ERROR("sqlite: %s: %s", sql, msg ? msg : "?");
    sqlite3_free(msg);
    return -1;
  }
  return 0;
}

static int migrate(rm__store_t *c, char *err, size_t errlen)
{
  sqlite3_stmt *st = NULL;
  int version = 0;
  if (sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    version = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (version > rm__migration_count) {
    snprintf(err, errlen, "database schema version %d is newer than this "
             "binary knows (%d)", version, rm__migration_count);
    return -1;
  }
  for (int i = version; i < rm__migration_count; i++) {
    char *msg = NULL, pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", i + 1);
    if (sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(c->db, rm__migrations[i].sql, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(c->db, pragma, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(c->db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
      snprintf(err, errlen, "migration %s failed: %s", rm__migrations[i].name,
               msg ? msg : sqlite3_errmsg(c->db));
      sqlite3_free(msg);
      sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
      return -1;
    }
    RM_INFO("applied migration %s", rm__migrations[i].name);
  }
  return 0;
}

/* The database and its -wal/-shm are owner-only: they hold every job's
 * commands, hosts and events. A new database file is made 0600 here before
 * SQLite opens it, and SQLite gives the -wal and -shm files it creates the
 * database file's permissions. One found wider is warned about, not
 * changed (its owner chose it; docs/security.md says how to fix it). */
static void owner_only(const char *path)
{
  static const char *const ext[] = {"", "-wal", "-shm"};
  struct stat st;
  int fd;
  if (!path[0] || !strcmp(path, ":memory:") || !strncmp(path, "file:", 5)) return;
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
    char p[4200];
    snprintf(p, sizeof p, "%s%s", path, ext[i]);
    if (stat(p, &st) == 0 && (st.st_mode & 077))
      RM_WARN("%s has mode %04o: it is readable by other local users; make it owner-only "
              "(chmod 600 %s)", p, (unsigned)(st.st_mode & 07777), p);
  }
}

/* ONE COORDINATOR PER DATABASE (top): 0, or -1 with the holder in err. */
static int lock_db(rm__store_t *c, const char *path, char *err, size_t errlen)
{
  char lp[4096], host[256] = "?", held[300] = "";
  snprintf(lp, sizeof lp, "%s.lock", path);
  c->lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (c->lock_fd < 0) {
    snprintf(err, errlen, "cannot open lock file %s: %s (a coordinator writes its "
             "database's folder: the lock, the WAL, the database itself)", lp, strerror(errno));
    return -1;
  }
  if (flock(c->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    ssize_t n = pread(c->lock_fd, held, sizeof held - 1, 0);
    held[n > 0 ? n : 0] = '\0';
    held[strcspn(held, "\n")] = '\0';
    if (e == EWOULDBLOCK)
      snprintf(err, errlen, "database %s is in use by another coordinator (%s; lock file %s): "
               "stop it first, or give this one another --db", path, held[0] ? held : "holder unknown", lp);
    else
      snprintf(err, errlen, "cannot lock %s: %s", lp, strerror(e));
    close(c->lock_fd);
    c->lock_fd = -1;
    return -1;
  }
  gethostname(host, sizeof host - 1);
  int k = snprintf(held, sizeof held, "pid %ld host %s\n", (long)getpid(), host);
  if (ftruncate(c->lock_fd, 0) != 0 || pwrite(c->lock_fd, held, (size_t)k, 0) != k)
    RM_WARN("lock file %s: cannot write the holder: %s", lp, strerror(errno));
  return 0;
}

rm_status_t rm__store_open(const char *path, rm__store_t **out, char *err,
                           size_t errlen)
{
  rm__store_t *c = rm__xcalloc(1, sizeof *c);
  c->lock_fd = -1;
  c->path = rm__xstrdup(path);
  os_faults_install();
  if (strcmp(path, ":memory:") != 0 && lock_db(c, path, err, errlen)) goto fail;
  owner_only(path);
  if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                      SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "cannot open database %s: %s", path,
             c->db ? sqlite3_errmsg(c->db) : "out of memory");
    goto fail;
  }
  /* SQLite opens a file it may not write (its mode or owner) read-only
   * and would refuse every write later, one request at a time: a
   * coordinator that can acknowledge nothing says so at start instead */
  if (sqlite3_db_readonly(c->db, "main") == 1) {
    snprintf(err, errlen, "database %s is read-only for this process (its mode, owner or "
             "file system): a coordinator must store every change before it answers; "
             "make it writable or give another --db", path);
    goto fail;
  }
  sqlite3_busy_timeout(c->db, 5000);
  if (rm__store_exec(c, "PRAGMA journal_mode=WAL") ||
      rm__store_exec(c, "PRAGMA synchronous=NORMAL") ||
      rm__store_exec(c, "PRAGMA foreign_keys=ON")) {
    snprintf(err, errlen, "cannot configure database %s: %s", path,
             sqlite3_errmsg(c->db));
    goto fail;
  }
  if (migrate(c, err, errlen)) goto fail;
  if (rm__store_key_open(c, path, err, errlen)) goto fail;
  rm__store_count_jobs(c);
  *out = c;
  return RM_OK;
fail:
  for (int i = 0; i < c->nstmts; i++) sqlite3_finalize(c->stmts[i].st);
  sqlite3_close(c->db);
  if (c->lock_fd >= 0) close(c->lock_fd);
  free(c->path);
  free(c);
  return RM_ERR_SYSTEM;
}

void rm__store_close(rm__store_t *c)
{
  if (!c) return;
  for (int i = 0; i < c->nstmts; i++) sqlite3_finalize(c->stmts[i].st);
  c->nstmts = 0;
  memset(c->key, 0, sizeof c->key);
  free(c->txn_new);
  free(c->txn_touched);
  if (c->db && sqlite3_close(c->db) != SQLITE_OK)
    RM_ERROR("sqlite close: %s", sqlite3_errmsg(c->db));
  if (c->lock_fd >= 0) close(c->lock_fd); /* last: the database is closed */
  free(c->path);
  free(c);
}

void rm__store_begin(rm__store_t *c)
{
  if (!c || c->in_txn) return;
  int rc = rm__stmt_run(c, rm__stmt(c, "BEGIN"));
  c->in_txn = 1;
  c->txn_writes = 0;
  c->ntxn_new = 0;
  c->ntxn_touched = 0;
  /* a section whose BEGIN failed fails as a whole: its writes must not
   * become autocommits that are durable one by one */
  c->txn_rc = rc == SQLITE_DONE ? 0 : rc;
}

/* WRITE FAILURES. One log line when the store starts failing (or fails for
 * another reason than before) and one when a write succeeds again, not
 * one per refused request; the failed commits are counted. */
static void fail_state(rm__store_t *c, int rc, const char *why)
{
  c->failed_commits++;
  if (c->fail_rc != rc || strcmp(c->fail_why, why) != 0) /* EIO then EROFS: two lines */
    RM_ERROR("store: writes are failing (%s); every write is refused until "
             "one succeeds again", why);
  c->fail_rc = rc;
  snprintf(c->fail_why, sizeof c->fail_why, "%s", why);
}

static void ok_state(rm__store_t *c)
{
  if (!c->fail_rc) return;
  RM_INFO("store: writes succeed again (after %s)", c->fail_why);
  c->fail_rc = 0;
  c->fail_why[0] = '\0';
}

int rm__store_commit(rm__store_t *c)
{
  int rc = 0;
  if (!c || !c->in_txn) return 0;
  if (!c->txn_rc) {
    c->in_txn = 0; /* COMMIT itself is not a step of the transaction */
    rc = rm__stmt_run(c, rm__stmt(c, "COMMIT"));
    c->in_txn = 1;
    if (rc == SQLITE_DONE) {
      rc = 0;
    } else {
      c->txn_rc = rc;
    }
  }
  if (c->txn_rc) {
    char why[200];
    rc = c->txn_rc;
    if (c->txn_errno)
      snprintf(why, sizeof why, "%s: %s", sqlite3_errstr(rc), strerror(c->txn_errno));
    else
      snprintf(why, sizeof why, "%s", sqlite3_errstr(rc));
    c->in_txn = 0;
    if (sqlite3_get_autocommit(c->db) == 0 &&
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
      RM_ERROR("sqlite: ROLLBACK: %s", sqlite3_errmsg(c->db));
    rm__store_count_jobs(c); /* the rolled-back writes moved the counts */
    fail_state(c, rc, why);
  } else if (c->txn_writes > 0) {
    ok_state(c);
  }
  c->in_txn = 0;
  c->txn_rc = 0;
  c->txn_errno = 0;
  return rc;
}

void rm__store_id_add(uint64_t **ids, size_t *n, size_t *cap, uint64_t id)
{
  for (size_t i = 0; i < *n; i++)
    if ((*ids)[i] == id) return;
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 8;
    *ids = rm__xrealloc(*ids, *cap * sizeof **ids);
  }
  (*ids)[(*n)++] = id;
}

void rm__store_touch(rm__store_t *c, uint64_t id)
{
  if (c->in_txn && id) rm__store_id_add(&c->txn_touched, &c->ntxn_touched, &c->captxn_touched, id);
}

const uint64_t *rm__store_txn_touched(const rm__store_t *c, size_t *n)
{
  *n = c->ntxn_touched;
  return c->txn_touched;
}

int rm__store_failing(rm__store_t *c, char *why, size_t len)
{
  if (why && len) snprintf(why, len, "%s", c->fail_rc ? c->fail_why : "");
  if (!c->fail_rc) return RM__STORE_OK;
  return (c->fail_rc & 0xff) == SQLITE_FULL ? RM__STORE_FULL : RM__STORE_ERROR;
}

uint64_t rm__store_failed_commits(const rm__store_t *c) { return c->failed_commits; }

/* Free space the probe wants on the database's filesystem before it tries
 * a write after SQLITE_FULL: a one-page write can succeed in space a job's
 * rows cannot use, and readiness must not flap green while submissions
 * are refused. */
#define PROBE_FREE_MIN (256 * 1024)

static int space_left(const rm__store_t *c)
{
  char dir[4096];
  struct statvfs v;
  snprintf(dir, sizeof dir, "%s", c->path ? c->path : ".");
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  if (statvfs(dir, &v) != 0) return 1; /* unknown: let the write say */
  return (uint64_t)v.f_bavail * v.f_frsize >= PROBE_FREE_MIN;
}

int rm__store_probe(rm__store_t *c)
{
  /* rewrites the header's user_version with its own value: one page into
   * the WAL, so a full disk or a failing device answers here */
  int v = 0;
  if ((c->fail_rc & 0xff) == SQLITE_FULL && !space_left(c)) return SQLITE_FULL;
  char sql[64];
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  snprintf(sql, sizeof sql, "PRAGMA user_version=%d", v);
  rm__store_begin(c);
  int rc = injected();
  if (!rc && sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    rc = sqlite3_extended_errcode(c->db);
    note_errno(c, rc);
  }
  os_fail = 0;
  if (rc && !c->txn_rc) c->txn_rc = rc;
  c->txn_writes++;
  return rm__store_commit(c);
}

const uint64_t *rm__store_txn_new(const rm__store_t *c, size_t *n)
{
  *n = c->ntxn_new;
  return c->txn_new;
}
