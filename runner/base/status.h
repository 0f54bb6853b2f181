/* Sundial: status codes shared by every module. */
#ifndef SD_RUNNER_BASE_STATUS_H
#define SD_RUNNER_BASE_STATUS_H

/*
 * The codes are part of the C SDK's public vocabulary, so they are defined once, in the SDK's
 * installed header; the runner includes the same definition.
 */
#include <sundial/status.h>

#endif
