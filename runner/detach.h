/* Sundial: the launcher steps aside once its Python client is past start-up (see detach.c). */
#ifndef SD_RUNNER_DETACH_H
#define SD_RUNNER_DETACH_H

#include <stdbool.h>

/*
 * Whether this process was started as Beam Python's PrismRunner starts its runner: with
 * Prism's command line including --log_kind (prism_cli, log_kind_given), stdout a pipe that
 * stderr shares, and a Python interpreter as the parent process. SUNDIAL_DETACH=0 says no
 * whatever the launch; SUNDIAL_DETACH=1 waives the parent check (the pipe is still needed:
 * it is how the server learns that its client is gone).
 */
bool sd_detach_wanted(bool prism_cli, bool log_kind_given);

/*
 * Split in two: the launcher (this process, whose id the client holds) waits in here and never
 * returns; the server, its child, returns the write end of the pipe sd_detach_ready() uses,
 * after starting the thread that shuts the server down (SIGTERM to itself) when its stdout's
 * reader is gone. keep_fd is a descriptor the launcher closes (the listening socket).
 * Returns -1 when the split cannot be made: this process then serves as usual.
 * Call before any thread starts.
 */
int sd_detach_split(int keep_fd);

/* The server is past its client's start-up: the launcher exits 0. Closes *fd; sets it to -1. */
void sd_detach_ready(int *fd);

#endif
