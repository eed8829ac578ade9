/* rm_signal.h - the stop signals of the long-running commands (`ringmaster
 * serve`, `ringmaster relay`, the CLI's `run`). */
#ifndef RM_COMMON_RM_SIGNAL_H
#define RM_COMMON_RM_SIGNAL_H

#include <signal.h>
#include <string.h>

/* SIGINT and SIGTERM call fn (no SA_RESTART: a blocking call returns
 * EINTR, so the loop that set fn sees its flag). */
static inline void rm__on_stop_signals(void (*fn)(int))
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

#endif
