/* Sundial: unguessable identifiers from the kernel's random source. */
#ifndef SD_RUNNER_BASE_RAND_H
#define SD_RUNNER_BASE_RAND_H

#include <stddef.h>

#include "runner/base/status.h"

/*
 * Ids that hand out access (worker ids, descriptor ids) must not be guessable by another
 * client of the same port: they carry SD_TOKEN_BYTES (128 bits) from getrandom(2).
 */
#define SD_TOKEN_BYTES 16
#define SD_TOKEN_HEX   (2 * SD_TOKEN_BYTES + 1) /* hex digits and the NUL */

/* Fill out[SD_TOKEN_HEX] with 32 lowercase hex digits. SD_EIO when the kernel refuses. */
SD_MUST_CHECK sd_status sd_token_hex(char out[SD_TOKEN_HEX]);

#endif
