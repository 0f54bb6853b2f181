/* Sundial: the few file-system operations the runner needs to do safely. */
#ifndef SD_RUNNER_BASE_FS_H
#define SD_RUNNER_BASE_FS_H

#include "runner/base/err.h"

/*
 * Remove path and everything below it, never following a symlink (a link is removed, not its
 * target). Best effort: what cannot be removed stays.
 */
void sd_rmtree(const char *path);

/*
 * Make sure path is a directory only this user can write: created with mode 0700 when
 * missing (its parent must exist); otherwise it must be a real directory (not a symlink),
 * owned by the effective user, and writable by nobody else. Errors name the path and the rule.
 */
SD_MUST_CHECK sd_status sd_private_dir(const char *path, sd_err *err);

/*
 * Create a fresh private directory "$TMPDIR/PREFIX-XXXXXX" (mkdtemp: mode 0700, a name
 * nobody could have pre-created). OUT: out (caller frees with sd_free).
 */
SD_MUST_CHECK sd_status sd_private_tmpdir(const char *prefix, char **out, sd_err *err);

/*
 * Have path removed once this process is gone, even when it is killed with SIGKILL: a small
 * child process waits for that on a pipe (fs.c). Call it before any thread starts.
 */
SD_MUST_CHECK sd_status sd_remove_when_gone(const char *path, sd_err *err);

#endif
