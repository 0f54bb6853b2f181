#!/bin/sh
# ts_process_boot.sh - the command of the beam:env:process:v1 environment that
# ts_process_runner.js puts into TypeScript pipelines. A runner starts it with the standard
# boot flags (--id, --provision_endpoint, ...); it replaces itself with node running
# ts_process_boot.js next to it (exec, so the runner's pid is the boot program's and its
# SIGTERM reaches the boot program directly). `node` must be on PATH.
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd) || exit 70
exec node "$here/ts_process_boot.js" "$@"
