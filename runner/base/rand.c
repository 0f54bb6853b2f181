/*
 * Sundial: random tokens.
 *
 * getrandom(2) with no flags blocks only until the kernel's pool is first initialised (early
 * boot) and never returns short reads for requests of at most 256 bytes, but a signal can
 * interrupt it, so the loop retries EINTR. There is no fallback to a weaker source: an id
 * that another local user could predict is worse than a job that fails to start.
 */
#include "runner/base/rand.h"

#include <errno.h>
#include <stdint.h>
#include <sys/random.h>

sd_status sd_token_hex(char out[SD_TOKEN_HEX])
{
    static const char digits[] = "0123456789abcdef";
    uint8_t raw[SD_TOKEN_BYTES];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            out[0] = '\0';
            return SD_EIO;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = digits[raw[i] >> 4];
        out[2 * i + 1] = digits[raw[i] & 0x0f];
    }
    out[2 * SD_TOKEN_BYTES] = '\0';
    return SD_OK;
}
