/*
 * Sundial C SDK: windows and panes, the "where" and "which firing" of every element.
 */
#ifndef SD_SUNDIAL_WINDOW_H
#define SD_SUNDIAL_WINDOW_H

#include <stdbool.h>
#include <stdint.h>
#include <sundial/bytes.h>
#include <sundial/export.h>
#include <sundial/time.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A window. Interval windows are [start, end) with max timestamp end - 1. The global window has
 * global = true (start = SD_TIME_MIN, end = SD_TIME_GLOBAL_MAX + 1, max timestamp
 * SD_TIME_GLOBAL_MAX). A custom window (beam:coder:custom_window:v1) has custom = true, its max
 * timestamp as end - 1, start = SD_TIME_MIN, and custom_bytes = its component encoding
 * (borrowed from the decoded input, or from the caller when encoding).
 */
typedef struct sd_window {
    sd_time start;
    sd_time end;
    bool global;
    bool custom;
    sd_bytes custom_bytes;
} sd_window;

/* The global window value. */
SD_API sd_window sd_window_global(void);

/* The interval window [start, end). */
SD_API sd_window sd_window_interval(sd_time start, sd_time end);

/* The window's inclusive maximum timestamp. */
SD_API sd_time sd_window_max_ts(const sd_window *w);

/* Total order (global first, then by max timestamp, then start, then custom bytes). */
SD_API int sd_window_cmp(const sd_window *a, const sd_window *b);
SD_API bool sd_window_equal(const sd_window *a, const sd_window *b);

/* Pane timings (sd_pane.timing). */
#define SD_PANE_EARLY   0
#define SD_PANE_ON_TIME 1
#define SD_PANE_LATE    2
#define SD_PANE_UNKNOWN 3

/*
 * Which firing of a window's trigger produced an element: its timing, its index among the
 * window's panes (0, 1, ...), its index among the non-early panes (-1 for early ones), and
 * whether it is the first and the last pane of the window.
 */
typedef struct sd_pane {
    bool first;
    bool last;
    int timing; /* SD_PANE_EARLY .. SD_PANE_UNKNOWN */
    int64_t index;
    int64_t nonspec_index; /* -1 for early panes */
} sd_pane;

/*
 * The default pane (first, last, UNKNOWN, 0, 0), encoded as the single byte 0x0f. The _INIT
 * forms are brace initialisers for static tables; the others are compound literals.
 */
#define SD_PANE_NO_FIRING_INIT                                                                 \
    {                                                                                          \
        .first = true, .last = true, .timing = SD_PANE_UNKNOWN, .index = 0, .nonspec_index = 0 \
    }
#define SD_PANE_NO_FIRING      ((sd_pane)SD_PANE_NO_FIRING_INIT)
#define SD_PANE_NO_FIRING_BYTE 0x0f

/* The only firing of a window, on time (first, last, ON_TIME, 0, 0), encoded as 0x07. */
#define SD_PANE_ON_TIME_AND_ONLY_FIRING_INIT                                                   \
    {                                                                                          \
        .first = true, .last = true, .timing = SD_PANE_ON_TIME, .index = 0, .nonspec_index = 0 \
    }
#define SD_PANE_ON_TIME_AND_ONLY_FIRING ((sd_pane)SD_PANE_ON_TIME_AND_ONLY_FIRING_INIT)

SD_API bool sd_pane_equal(const sd_pane *a, const sd_pane *b);

#ifdef __cplusplus
}
#endif

#endif
