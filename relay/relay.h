/*
 * relay.h - `ringmaster relay` (relay.c): a host's relay, carrying its
 * workers' Sessions to the coordinator as the lanes of one Relay stream.
 */
#ifndef RM_RELAY_RELAY_H
#define RM_RELAY_RELAY_H

/* The sub-command: argv are its arguments (after "relay"). Runs until
 * SIGINT / SIGTERM; returns the exit status. */
int rm_relay_main(int argc, char **argv);

#endif
