/*
 * secagg_hook.c - the secure-aggregation fault hooks, in the hook table of
 * tests/doubles' shared object (hooks.c; common/rm_testhook.h), which
 * secagg.c of a test-hook build calls; inert unless the environment names
 * them:
 *
 *   RINGMASTER_TEST_SECAGG_DIE=RANK:ROUND:SEQ[,RANK:ROUND:SEQ...]
 *       the process whose generation-local rank is RANK (* = whatever its
 *       rank: for a test that gives the variable to one worker only, whose
 *       rank the coordinator assigns) SIGKILLs itself
 *       (no cleanup, like a crash) at the start of ROUND (keys, confirm,
 *       mask, reduce, open, unmask) of call SEQ; SEQ is ignored for keys and
 *       confirm (once per generation). Dying at "open" is the interesting
 *       case: every member holds the masked sum, nobody can unmask it.
 *   RINGMASTER_TEST_SECAGG_TAMPER=RANK (or *, as above)
 *       that rank flips one bit of the public key it received from its
 *       lowest neighbour before deriving seeds: a substituted key, which
 *       CONFIRM must catch on every rank.
 *
 * Both are parsed once per process (after a fork the child re-parses only
 * if the parent never did; the test programs set the env before forking).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doubles.h"

#define MAX_DIE 16

static struct {
  int n;
  struct {
    int rank;
    char round[16];
    unsigned long long seq;
  } at[MAX_DIE];
  int tamper; /* rank, or -1 */
} hook;
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;

static void hook_parse(void)
{
  const char *v = getenv("RINGMASTER_TEST_SECAGG_DIE"), *t;
  hook.tamper = -1;
  while (v && *v && hook.n < MAX_DIE) {
    int rank = -1;
    unsigned long long seq = 0;
    char round[16];
    int got = v[0] == '*' ? 1 + sscanf(v, "*:%15[a-z]:%llu", round, &seq)
                          : sscanf(v, "%d:%15[a-z]:%llu", &rank, round, &seq);
    if (v[0] == '*') rank = -1;
    if (got >= 2) {
      hook.at[hook.n].rank = rank;
      memcpy(hook.at[hook.n].round, round, sizeof round);
      hook.at[hook.n].seq = seq;
      hook.n++;
    }
    v = strchr(v, ',');
    if (v) v++;
  }
  t = getenv("RINGMASTER_TEST_SECAGG_TAMPER");
  if (t && *t) hook.tamper = t[0] == '*' ? -2 : atoi(t);
}

void rm__double_secagg_die(int rank, const char *round, uint64_t seq)
{
  int once = !strcmp(round, "keys") || !strcmp(round, "confirm");
  pthread_once(&hook_once, hook_parse);
  for (int i = 0; i < hook.n; i++) {
    if ((hook.at[i].rank >= 0 && hook.at[i].rank != rank) || strcmp(hook.at[i].round, round))
      continue;
    if (!once && hook.at[i].seq != seq) continue;
    fprintf(stderr, "ringmaster: test hook RINGMASTER_TEST_SECAGG_DIE: rank %d SIGKILL at "
            "%s of call %llu (pid %d)\n", rank, round, (unsigned long long)seq, (int)getpid());
    fflush(stderr);
    raise(SIGKILL);
  }
}

int rm__double_secagg_tamper(int rank)
{
  pthread_once(&hook_once, hook_parse);
  return hook.tamper == -2 || (hook.tamper >= 0 && hook.tamper == rank);
}
