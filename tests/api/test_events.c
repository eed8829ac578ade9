/*
 * test_events.c - event subscribers get exactly what the event log keeps
 * (coordinator/core/events.c CALLBACK QUEUE: a section's events wait for
 * its COMMIT packed, and are unpacked for the subscribers), on a real
 * coordinator with a temp SQLite file, in one process.
 *
 *   - 40 jobs submitted, 10 of them failed with reasons of every length up
 *     to past RM_COORD_TEXT_MAX (the event's message is cut to fit), one
 *     with an empty reason: every event read back from the log
 *     (rm_coord_events) reached the subscriber once, in seq order, with the
 *     same job, time, kind, rank, generation and message, byte for byte;
 *   - after rm_coord_unsubscribe nothing more arrives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord.h"

#include "coord_fixture.h"
#include "rm_testcheck.h"

#define MAX_EVENTS 512

static rm_event_t got[MAX_EVENTS];
static size_t ngot;

static void on_event(void *ctx, const rm_event_t *ev)
{
  (void)ctx;
  if (ngot < MAX_EVENTS) got[ngot] = *ev;
  ngot++;
}

int main(void)
{
  char dir[] = "/tmp/rm-test-events-XXXXXX", db[128];
  if (!mkdtemp(dir)) return 1;
  snprintf(db, sizeof db, "%s/c.db", dir);
  rm_coord_t *c = open_coord(db);
  if (!c) return 1;
  uint64_t seq0 = rm_coord_event_seq(c);
  int sub = rm_coord_subscribe(c, on_event, NULL);
  CHECK(sub > 0);
  static char reason[3 * RM_COORD_TEXT_MAX];
  for (int i = 0; i < 40; i++) {
    uint64_t id = submit_named(c, "ev", i);
    if (i % 4 == 0) { /* reasons of 0, 100, ... bytes; the last ones past the cap */
      size_t len = (size_t)(i / 4) * 300;
      for (size_t k = 0; k < len; k++) reason[k] = (char)('a' + (k * 7 + i) % 26);
      reason[len] = '\0';
      CHECK(rm_coord_job_fail(c, id, reason) == RM_OK);
    }
  }
  rm_event_t *ev = NULL;
  size_t n = 0;
  CHECK(rm_coord_events(c, 0, seq0, MAX_EVENTS, &ev, &n) == RM_OK);
  CHECKF(n >= 50 && n == ngot, "%zu events in the log after %llu, %zu to the subscriber", n,
         (unsigned long long)seq0, ngot);
  int longest = 0;
  for (size_t i = 0; i < n && i < ngot; i++) {
    const rm_event_t *a = &ev[i], *b = &got[i];
    CHECKF(a->seq == b->seq && a->job_id == b->job_id && a->time_ms == b->time_ms &&
           a->rank == b->rank && a->generation == b->generation &&
           !strcmp(a->kind, b->kind) && !strcmp(a->message, b->message),
           "event %zu: log seq %llu %s '%.40s' / subscriber seq %llu %s '%.40s'", i,
           (unsigned long long)a->seq, a->kind, a->message, (unsigned long long)b->seq,
           b->kind, b->message);
    if (i) CHECK(b->seq > got[i - 1].seq);
    if ((int)strlen(b->message) > longest) longest = (int)strlen(b->message);
  }
  CHECKF(longest == RM_COORD_TEXT_MAX - 1, "the longest message is %d bytes", longest);
  free(ev);
  rm_coord_unsubscribe(c, sub);
  size_t before = ngot;
  submit_named(c, "ev", 99);
  CHECK(ngot == before);
  rm_coord_close(c);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
  return rm_check_exit("test_events");
}
