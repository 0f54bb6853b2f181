/* Sundial: binds the job service to the transport (sd_rpc_server methods, sd_rpc_call_* sends). */

/*
 * The job service logic (jobsvc.c, artifacts.c) answers through the small sd__jobsvc_io seam
 * so it can be tested without gRPC. This file is the production side of that seam and the
 * only part of the module that calls the transport:
 *   - one sd_rpc_handler per method; its ctx names the method, and the call record returned
 *     by sd__jobsvc_on_open() rides on the call as sd_rpc_call_data;
 *   - send/finish/queue length map one to one onto sd_rpc_call_send/sd_rpc_call_finish/
 *     sd_rpc_call_send_queue_len;
 *   - paced GetArtifact streams wait for room in the send queue. The transport has no
 *     "queue drained" callback, so a 2 ms libev timer re-runs sd__jobsvc_pump() while any
 *     stream is waiting and stops itself when none is. The cost is one wake-up per 2 ms during
 *     a large artifact transfer, which is far below the cost of the transfer itself.
 * Kept apart from jobsvc.c so that unit tests which never call sd_jobsvc_register() do not
 * pull the transport's symbols into their link.
 */
#include <ev.h>

#include "runner/base/alloc.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"

#define PUMP_INTERVAL_S 0.002

typedef struct glue glue;

typedef struct glue_slot {
    glue *g;
    sd__jobsvc_method m;
} glue_slot;

struct glue {
    sd_jobsvc *svc;
    struct ev_loop *loop;
    ev_timer pump;
    bool pump_active;
    glue_slot slots[SD__JS_METHOD_COUNT];
};

static sd_status io_send(void *io_ctx, void *call, sd_bytes msg)
{
    (void)io_ctx;
    return sd_rpc_call_send(call, msg);
}

static void io_finish(void *io_ctx, void *call, sd_rpc_code code, const char *message)
{
    (void)io_ctx;
    sd_rpc_call_finish(call, code, message);
}

static size_t io_queue_len(void *io_ctx, void *call)
{
    (void)io_ctx;
    return sd_rpc_call_send_queue_len(call);
}

static void pump_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    glue *g = w->data;
    sd__jobsvc_pump(g->svc);
    bool waiting = false;
    for (const sd__jobsvc_rec *rec = g->svc->recs; rec != NULL && !waiting; rec = rec->next) {
        waiting = rec->pump_wanted && !rec->finished;
    }
    if (!waiting) {
        ev_timer_stop(loop, w);
        g->pump_active = false;
    }
}

static void io_want_pump(void *io_ctx)
{
    glue *g = io_ctx;
    if (!g->pump_active) {
        g->pump_active = true;
        ev_timer_again(g->loop, &g->pump);
    }
}

static void io_release(void *io_ctx)
{
    glue *g = io_ctx;
    if (g->pump_active) {
        ev_timer_stop(g->loop, &g->pump);
    }
    sd_free(g);
}

static void h_open(sd_rpc_call *call, sd_bytes request, void *ctx)
{
    glue_slot *s = ctx;
    void *rec = sd__jobsvc_on_open(s->g->svc, s->m, call, request);
    sd_rpc_call_set_data(call, rec);
}

static void h_message(sd_rpc_call *call, sd_bytes msg, void *ctx)
{
    glue_slot *s = ctx;
    sd__jobsvc_on_message(s->g->svc, sd_rpc_call_data(call), msg);
}

static void h_half_close(sd_rpc_call *call, void *ctx)
{
    glue_slot *s = ctx;
    sd__jobsvc_on_half_close(s->g->svc, sd_rpc_call_data(call));
}

static void h_close(sd_rpc_call *call, bool cancelled, void *ctx)
{
    glue_slot *s = ctx;
    void *rec = sd_rpc_call_data(call);
    sd_rpc_call_set_data(call, NULL);
    sd__jobsvc_on_close(s->g->svc, rec, cancelled);
}

sd_status sd_jobsvc_register(sd_jobsvc *svc, sd_rpc_server *srv, const char *self_endpoint)
{
    if (svc->registered || svc->rpc == NULL) {
        return SD_ESTATE;
    }
    if (sd_jobsvc_set_endpoint(svc, self_endpoint) != SD_OK) {
        return SD_ENOMEM;
    }
    glue *g = sd_calloc(1, sizeof(*g));
    if (g == NULL) {
        return SD_ENOMEM;
    }
    g->svc = svc;
    g->loop = sd_rpc_loop(svc->rpc);
    ev_timer_init(&g->pump, pump_cb, 0., PUMP_INTERVAL_S);
    g->pump.data = g;
    /* Installed first so that g is owned (and freed by destroy) whatever happens below:
     * after a partial registration the server may still hold handlers pointing into it. */
    sd__jobsvc_io io = { .send = io_send,
                         .finish = io_finish,
                         .send_queue_len = io_queue_len,
                         .want_pump = io_want_pump,
                         .release = io_release,
                         .io_ctx = g };
    sd__jobsvc_set_io(svc, &io);
    svc->registered = true;
    for (int m = 0; m < SD__JS_METHOD_COUNT; m++) {
        const sd__jobsvc_method_info *info = sd__jobsvc_method_get((sd__jobsvc_method)m);
        g->slots[m].g = g;
        g->slots[m].m = (sd__jobsvc_method)m;
        sd_rpc_handler h = { .on_open = h_open,
                             .on_message = h_message,
                             .on_half_close = h_half_close,
                             .on_close = h_close,
                             .ctx = &g->slots[m] };
        sd_status st = sd_rpc_server_add_method(srv, info->path, info->kind, &h);
        if (st != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}
