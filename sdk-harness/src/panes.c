/*
 * Sundial C SDK: pane selection for the per-pane assertions, and small pane/window helpers.
 *
 * An assertion about "the ON_TIME pane of window w" cannot gather its elements in w itself:
 * the gathering GroupByKey would run pc's own trigger again and check partial panes. So the
 * assertion composite first *selects*, in pc's windowing, the elements whose window and pane
 * match (this DoFn, sundial:assert_panes, which sees each element once per window with its
 * pane), then rewindows the survivors into the plain global window where one final firing
 * gathers everything for the checker (pipeline.c, add_assertion).
 *
 * Configuration (written by sd__pane_select_config, read once per DoFn instance in setup):
 *     byte(has_window) [ts(start) ts(end)] varint(sd_pane_filter)
 * Timestamps use the coder's big-endian form (sd_coder_put_ts), like the other built-ins.
 */
#include "runner/base/alloc.h"
#include "runner/base/log.h"
#include "sdk-harness/src/sdk_int.h"

typedef struct select_state {
    bool has_window;
    sd_window window;
    sd_pane_filter panes;
} select_state;

sd_status sd__pane_select_config(sd_buf *out, const sd_window *w, sd_pane_filter panes)
{
    sd_status st = sd_buf_append_byte(out, w != NULL ? 1 : 0);
    if (st == SD_OK && w != NULL) {
        if ((st = sd_coder_put_ts(out, w->start)) == SD_OK) {
            st = sd_coder_put_ts(out, w->end);
        }
    }
    return st != SD_OK ? st : sd_buf_put_varint(out, (uint64_t)panes);
}

static sd_status select_setup(sd_bytes config, void **state, sd_err *err)
{
    sd_reader r = sd_reader_make(config);
    uint8_t hw;
    uint64_t panes;
    select_state *s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "out of memory");
    }
    if (sd_reader_byte(&r, &hw) != SD_OK ||
        (hw && (sd_coder_get_ts(&r, &s->window.start) != SD_OK ||
                sd_coder_get_ts(&r, &s->window.end) != SD_OK)) ||
        sd_reader_varint(&r, &panes) != SD_OK || panes > SD_PANES_FINAL) {
        sd_free(s);
        return sd_err_set(err, SD_EPROTO, "assertion pane selection: malformed configuration");
    }
    s->has_window = hw != 0;
    s->panes = (sd_pane_filter)panes;
    *state = s;
    return SD_OK;
}

static void select_teardown(void *state)
{
    sd_free(state);
}

static bool pane_matches(sd_pane_filter f, const sd_pane *pane)
{
    switch (f) {
    case SD_PANES_ALL:
        return true;
    case SD_PANES_ON_TIME:
        return pane->timing == SD_PANE_ON_TIME;
    case SD_PANES_EARLY:
        return pane->timing == SD_PANE_EARLY;
    case SD_PANES_LATE:
        return pane->timing == SD_PANE_LATE;
    case SD_PANES_FINAL:
        return pane->last;
    }
    return false;
}

static sd_status select_process(sd_ctx *c, void *state)
{
    const select_state *s = state;
    if (s->has_window) {
        sd_window w = sd_ctx_window(c);
        if (w.global || w.start != s->window.start || w.end != s->window.end) {
            return SD_OK;
        }
    }
    sd_pane pane = sd_ctx_pane(c);
    if (!pane_matches(s->panes, &pane)) {
        return SD_OK;
    }
    return sd_emit(c, 0, sd_ctx_element(c));
}

void sd__register_time_builtins(void)
{
    static const sd_dofn select = { .setup = select_setup,
                                    .process = select_process,
                                    .teardown = select_teardown };
    if (sd_register_dofn(SD_FN_ASSERT_PANES, &select) != SD_OK) {
        SD_WARN("sdk", "could not register a built-in function");
    }
}

const char *sd_pane_timing_name(int timing)
{
    switch (timing) {
    case SD_PANE_EARLY:
        return "EARLY";
    case SD_PANE_ON_TIME:
        return "ON_TIME";
    case SD_PANE_LATE:
        return "LATE";
    default:
        return "UNKNOWN";
    }
}
