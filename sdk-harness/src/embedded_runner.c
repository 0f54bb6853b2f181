/*
 * Sundial C SDK: the embedded runner's side of <sundial/embedded.h>.
 *
 * This file is the whole of libsundial_embedded's interface: one exported object whose two
 * functions wrap runner/server/embed.h (a Sundial server on its own libev loop thread). It is
 * linked into the embedded library and into in-tree programs that run pipelines without an
 * endpoint, never into libsundial itself, so a worker carries no runner.
 */
#include <sundial/embedded.h>

#include "runner/server/embed.h"

static sd_status start(bool wall_clock, void **handle, const char **endpoint, sd_err *err)
{
    sd_server_config cfg = { .wall_clock = wall_clock };
    sd_embedded *e = NULL;
    sd_status st = sd_embedded_start(&cfg, &e, err);
    if (st != SD_OK) {
        return st;
    }
    *handle = e;
    *endpoint = sd_embedded_endpoint(e);
    return SD_OK;
}

static void stop(void *handle)
{
    sd_embedded_stop(handle);
}

const sd_embedded_runner sd_embedded_runner_v1 = {
    .abi = SD_EMBEDDED_RUNNER_ABI,
    .start = start,
    .stop = stop,
};
