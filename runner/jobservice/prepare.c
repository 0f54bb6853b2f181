/* Sundial: JobService.Prepare — checked off the loop thread, within the server's size limits. */

/*
 * Decoding and validating a pipeline costs time in proportion to its size (seconds for a few
 * hundred thousand transforms), and the loop thread serves every other client. So Prepare
 * runs in two halves when the service has a background pool (sd_jobsvc_set_background):
 *
 *   loop  open: size check on the raw bytes, copy them into an sd__prep, submit;
 *   pool  work: count the transforms on the wire (no decoding), unpack, validate;
 *   loop  done: create and publish the job, answer the call.
 *
 * The call is kept as an SD__REC_PREPARE record so a client that goes away (or the server
 * stopping) is noticed: rec->prep and prep->rec point at each other until either side ends.
 * A prep whose svc is NULL is detached: the service is closing or gone and its result is
 * dropped. Without a pool both halves run at once inside on_open (unit tests), and so does a
 * small request (up to SD__JOBSVC_INLINE_PREPARE_BYTES): checking it costs less than the two thread
 * hand-overs (about half a millisecond of a one-element job's submit-to-DONE), and it cannot stall
 * anyone.
 *
 * Limits (sd_jobsvc_set_limits): the request's size in bytes is checked before anything is
 * copied, and the number of transforms is counted by walking the wire format down to
 * Components.transforms (PrepareJobRequest.pipeline = 1, Pipeline.components = 1,
 * Components.transforms = 1), so a pipeline over the limit is refused in milliseconds
 * whatever its size.
 */
#include <stdio.h>
#include <string.h>

#include "runner/base/alloc.h"
#include "runner/base/bg.h"
#include "runner/base/log.h"
#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"

#define PB(name) org__apache__beam__model__job_management__v1__##name

typedef Org__Apache__Beam__Model__JobManagement__V1__PrepareJobResponse prepare_resp;

struct sd__prep {
    /* Loop side (never read by the pool thread). */
    sd_jobsvc *svc;      /* NULL once detached */
    sd__jobsvc_rec *rec; /* NULL when answered at once, or once the call closed */
    struct sd__prep *prev, *next;

    /* Inputs, owned. */
    uint8_t *bytes;
    size_t len;
    size_t max_transforms;
    sd_status (*validate)(void *ctx,
                          const Org__Apache__Beam__Model__Pipeline__V1__Pipeline *pipeline,
                          const Google__Protobuf__Struct *options,
                          sd_err *err);
    void *validate_ctx;

    /* Result, owned until handed to the job. */
    sd_pb_prepare_req *req;
    sd_status st;
    sd_err err;
};

/* ---------------------------------------------------------------- counting on the wire */

static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return true;
        }
    }
    return false;
}

/*
 * Visit every field `field` (length-delimited) of the message in [p, end): calls fn on its
 * contents, or counts it when fn is NULL. False when the bytes are not a well-formed message
 * (unpacking will then say what is wrong).
 */
static bool wire_each(const uint8_t *p,
                      const uint8_t *end,
                      uint64_t field,
                      bool (*fn)(const uint8_t *, const uint8_t *, size_t *),
                      size_t *count)
{
    while (p < end) {
        uint64_t tag, n;
        if (!wire_varint(&p, end, &tag)) {
            return false;
        }
        switch (tag & 7) {
        case 0:
            if (!wire_varint(&p, end, &n)) {
                return false;
            }
            break;
        case 1:
        case 5: {
            size_t w = (tag & 7) == 1 ? 8 : 4;
            if ((size_t)(end - p) < w) {
                return false;
            }
            p += w;
            break;
        }
        case 2:
            if (!wire_varint(&p, end, &n) || n > (uint64_t)(end - p)) {
                return false;
            }
            if ((tag >> 3) == field) {
                if (fn == NULL) {
                    (*count)++;
                } else if (!fn(p, p + n, count)) {
                    return false;
                }
            }
            p += n;
            break;
        default:
            return false; /* groups (3, 4) and reserved types: not in Beam's protos */
        }
    }
    return true;
}

static bool count_in_components(const uint8_t *p, const uint8_t *end, size_t *count)
{
    return wire_each(p, end, 1, NULL, count);
}

static bool count_in_pipeline(const uint8_t *p, const uint8_t *end, size_t *count)
{
    return wire_each(p, end, 1, count_in_components, count);
}

size_t sd__jobsvc_prepare_count_transforms(sd_bytes request)
{
    size_t count = 0;
    if (!wire_each(request.ptr, request.ptr + request.len, 1, count_in_pipeline, &count)) {
        return 0;
    }
    return count;
}

/* ---------------------------------------------------------------- the two halves */

static void prep_destroy(sd__prep *prep)
{
    if (prep->req != NULL) {
        sd__jobsvc_pb_destroy(&prep->req->base);
    }
    sd_free(prep->bytes);
    sd_free(prep);
}

/* Pool thread (or inline): everything that only needs the bytes. */
static void prep_work(void *arg)
{
    sd__prep *prep = arg;
    sd_err *err = &prep->err;
    size_t n = sd__jobsvc_prepare_count_transforms(sd_bytes_make(prep->bytes, prep->len));
    if (prep->max_transforms > 0 && n > prep->max_transforms) {
        prep->st = sd_err_set(err, SD_ETOOBIG,
                              "PrepareJobRequest: the pipeline has %zu transforms, more than this "
                              "server accepts (at most %zu; see --max_pipeline_transforms)",
                              n, prep->max_transforms);
        return;
    }
    prep->req = (sd_pb_prepare_req *)sd__jobsvc_pb_unpack(
        &PB(prepare_job_request__descriptor), sd_bytes_make(prep->bytes, prep->len), err);
    sd_free(prep->bytes);
    prep->bytes = NULL;
    if (prep->req == NULL) {
        prep->st = err->code != SD_OK ? err->code : SD_EINVAL;
        return;
    }
    if (prep->req->pipeline == NULL) {
        prep->st = sd_err_set(err, SD_EINVAL, "PrepareJobRequest: pipeline is missing");
        return;
    }
    if (prep->req->pipeline_options == NULL) {
        prep->req->pipeline_options = sd_malloc(sizeof(Google__Protobuf__Struct));
        if (prep->req->pipeline_options == NULL) {
            prep->st = sd_err_set(err, SD_ENOMEM, "out of memory preparing a job");
            return;
        }
        google__protobuf__struct__init(prep->req->pipeline_options);
    }
    if (prep->validate != NULL) {
        sd_status st = prep->validate(prep->validate_ctx, prep->req->pipeline,
                                      prep->req->pipeline_options, err);
        if (st != SD_OK) {
            if (err->code == SD_OK) {
                sd_err_set(err, st, "pipeline rejected (%s)", sd_status_name(st));
            }
            /* Validation speaks for the pipeline: only "unsupported" and "out of memory"
             * keep their own codes, every other problem is an invalid argument. */
            prep->st = (st == SD_EUNIMPL || st == SD_ENOMEM) ? st : SD_EINVAL;
            return;
        }
    }
    prep->st = SD_OK;
}

/* Loop thread: publish the job and answer. Takes req. */
static void publish(sd_jobsvc *svc, void *call, sd_pb_prepare_req *req)
{
    sd_err err = { 0 };
    sd__jobsvc_trim_history(svc);
    sd_job *job;
    sd_status st = sd__jobsvc_job_create(svc, req, &job, &err);
    if (st != SD_OK) {
        sd__jobsvc_reply_error(svc, call, st, sd_err_msg(&err));
        return;
    }

    prepare_resp resp;
    PB(prepare_job_response__init)(&resp);
    Org__Apache__Beam__Model__Pipeline__V1__ApiServiceDescriptor ep;
    org__apache__beam__model__pipeline__v1__api_service_descriptor__init(&ep);
    resp.preparation_id = job->id;
    resp.staging_session_token = job->id;
    /* Offer staging only when something must be fetched: the TypeScript client skips the
     * reverse stream entirely when the endpoint is unset. */
    if (svc->artifact_dir != NULL && svc->endpoint != NULL &&
        sd__jobsvc_pipeline_needs_staging(job->req->pipeline)) {
        ep.url = svc->endpoint;
        resp.artifact_staging_endpoint = &ep;
    }
    /* The job is published only once its answer is ready and sent: a client that got an
     * error never has a job it cannot name. */
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (sd__jobsvc_pb_pack(&resp.base, &bytes, &len) != SD_OK) {
        sd__jobsvc_job_destroy(job);
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory preparing a job");
        return;
    }
    if (sd_map_put_str(&svc->by_id, job->id, job) != SD_OK) {
        sd_free(bytes);
        sd__jobsvc_job_destroy(job);
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory preparing a job");
        return;
    }
    if (sd_vec_push(&svc->jobs, &job) != SD_OK) {
        sd_free(bytes);
        (void)sd_map_take(&svc->by_id, sd_bytes_str(job->id));
        sd__jobsvc_job_destroy(job);
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory preparing a job");
        return;
    }
    st = svc->io.send(svc->io.io_ctx, call, sd_bytes_make(bytes, len));
    sd_free(bytes);
    if (st != SD_OK) {
        svc->jobs.len--;
        (void)sd_map_take(&svc->by_id, sd_bytes_str(job->id));
        sd__jobsvc_job_destroy(job);
        sd__jobsvc_reply_error(svc, call, st, "could not send the Prepare response");
        return;
    }
    svc->next_job++;
    SD_INFO("jobservice", "prepared %s (name \"%s\")", job->id, sd_job_name(job));
    svc->io.finish(svc->io.io_ctx, call, SD_RPC_OK, NULL);
}

/* Loop thread: answer the call with what the work found. */
static void answer(sd_jobsvc *svc, void *call, sd__prep *prep)
{
    if (prep->st != SD_OK) {
        sd__jobsvc_reply_error(svc, call, prep->st, sd_err_msg(&prep->err));
        return;
    }
    sd_pb_prepare_req *req = prep->req;
    prep->req = NULL;
    publish(svc, call, req);
}

static void prep_unlink(sd_jobsvc *svc, sd__prep *prep)
{
    if (prep->prev != NULL) {
        prep->prev->next = prep->next;
    } else {
        svc->preps = prep->next;
    }
    if (prep->next != NULL) {
        prep->next->prev = prep->prev;
    }
    prep->prev = prep->next = NULL;
}

static void prep_done(void *arg, bool abandoned)
{
    sd__prep *prep = arg;
    if (abandoned || prep->svc == NULL) {
        prep_destroy(prep); /* detached or abandoned: nothing else may be touched */
        return;
    }
    sd_jobsvc *svc = prep->svc;
    prep_unlink(svc, prep);
    sd__jobsvc_rec *rec = prep->rec;
    if (rec != NULL) {
        rec->prep = NULL;
        if (!rec->finished) {
            rec->finished = true;
            answer(svc, rec->call, prep);
        }
    }
    prep_destroy(prep);
}

void *sd__jobsvc_prepare_open(sd_jobsvc *svc, void *call, sd_bytes request)
{
    if (svc->closing) {
        sd__jobsvc_reply_error(svc, call, SD_EUNAVAIL, "Prepare: the server is shutting down");
        return NULL;
    }
    if (svc->max_request_bytes > 0 && request.len > svc->max_request_bytes) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "PrepareJobRequest is %zu bytes, more than this server accepts (at most %zu; "
                 "see --max_pipeline_bytes)",
                 request.len, svc->max_request_bytes);
        sd__jobsvc_reply_error(svc, call, SD_ETOOBIG, msg);
        return NULL;
    }
    sd__prep *prep = sd_calloc(1, sizeof(*prep));
    if (prep == NULL || (prep->bytes = sd_malloc(request.len > 0 ? request.len : 1)) == NULL) {
        sd_free(prep);
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory preparing a job");
        return NULL;
    }
    if (request.len > 0) {
        memcpy(prep->bytes, request.ptr, request.len);
    }
    prep->len = request.len;
    prep->max_transforms = svc->max_transforms;
    prep->validate = svc->hooks.validate;
    prep->validate_ctx = svc->hooks.ctx;
    if (svc->bg == NULL || request.len <= svc->inline_bytes) {
        prep_work(prep);
        answer(svc, call, prep);
        prep_destroy(prep);
        return NULL;
    }
    sd__jobsvc_rec *rec = sd__jobsvc_rec_create(svc, SD__REC_PREPARE, call);
    if (rec == NULL) {
        prep_destroy(prep);
        sd__jobsvc_reply_error(svc, call, SD_ENOMEM, "out of memory preparing a job");
        return NULL;
    }
    prep->svc = svc;
    prep->rec = rec;
    rec->prep = prep;
    prep->next = svc->preps;
    if (svc->preps != NULL) {
        svc->preps->prev = prep;
    }
    svc->preps = prep;
    sd_status st = sd_bg_submit(svc->bg, prep_work, prep_done, prep);
    if (st != SD_OK) {
        prep_unlink(svc, prep);
        rec->prep = NULL;
        rec->finished = true;
        prep_destroy(prep);
        sd__jobsvc_reply_error(svc, call, st == SD_ENOMEM ? SD_ENOMEM : SD_EUNAVAIL,
                               "Prepare: cannot schedule the pipeline check");
    }
    return rec; /* closed later by the transport's on_close */
}

void sd__jobsvc_prepare_call_closed(sd__jobsvc_rec *rec)
{
    if (rec->prep != NULL) {
        rec->prep->rec = NULL;
        rec->prep = NULL;
    }
}

void sd__jobsvc_prepare_detach_all(sd_jobsvc *svc, bool answer_calls)
{
    while (svc->preps != NULL) {
        sd__prep *prep = svc->preps;
        prep_unlink(svc, prep);
        sd__jobsvc_rec *rec = prep->rec;
        if (rec != NULL) {
            rec->prep = NULL;
            if (answer_calls && !rec->finished) {
                rec->finished = true;
                sd__jobsvc_reply_error(svc, rec->call, SD_EUNAVAIL,
                                       "Prepare: the server is shutting down");
            }
        }
        prep->rec = NULL;
        prep->svc = NULL; /* its work may still run: its result is dropped */
    }
}
