/* Sundial: byte slices, bounded growable buffers, and a bounds-checked reader. */
#ifndef SD_RUNNER_BASE_BUF_H
#define SD_RUNNER_BASE_BUF_H

/*
 * sd_bytes, sd_buf and sd_reader belong to the C SDK's public vocabulary; they are defined in
 * the installed header, which the runner includes too.
 */
#include <sundial/bytes.h>

#include "runner/base/status.h"

#endif
