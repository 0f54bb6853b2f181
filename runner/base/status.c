/* Sundial: status code names, generated from the SD_STATUS_MAP X-macro. */
#include "runner/base/status.h"

const char *sd_status_name(sd_status code)
{
    switch (code) {
#define SD__STATUS_NAME(name, text) \
    case SD_##name:                 \
        return #name;
        SD_STATUS_MAP(SD__STATUS_NAME)
#undef SD__STATUS_NAME
    default:
        return "UNKNOWN";
    }
}

const char *sd_status_str(sd_status code)
{
    switch (code) {
#define SD__STATUS_STR(name, text) \
    case SD_##name:                \
        return text;
        SD_STATUS_MAP(SD__STATUS_STR)
#undef SD__STATUS_STR
    default:
        return "unknown status";
    }
}
