/* Sundial: read-only views of the job service, and Cancel/Drain for callers other than gRPC. */

/*
 * The web UI (runner/web) shows jobs, their times and their messages, and offers Cancel and
 * Drain buttons. It must not reach into struct sd_job, and it must not duplicate the Job
 * API's rules, so this file is the seam: accessors over the job objects, and the one
 * implementation of Cancel and Drain that the gRPC handlers in jobsvc.c call too.
 *
 * Everything here runs on the loop thread and returns borrowed pointers that are valid until
 * control returns to the loop (a job can be forgotten only when one is prepared or listed).
 * Nothing here allocates, so nothing here fails for want of memory.
 */
#include <assert.h>
#include <string.h>

#include "runner/jobservice/jobservice.h"
#include "runner/jobservice/jobservice_int.h"

size_t sd_jobsvc_jobs(sd_jobsvc *svc, sd_job *const **out_jobs)
{
    assert(svc != NULL && svc->magic == SD__JOBSVC_MAGIC);
    sd__jobsvc_trim_history(svc);
    *out_jobs = (sd_job *const *)svc->jobs.items;
    return svc->jobs.len;
}

sd_time sd_job_created_ms(const sd_job *job)
{
    return job->created_ms;
}

sd_time sd_job_started_ms(const sd_job *job)
{
    return job->started_ms;
}

sd_time sd_job_ended_ms(const sd_job *job)
{
    return sd_job_state_is_terminal(job->state) ? job->state_time_ms : 0;
}

size_t sd_job_history_len(const sd_job *job)
{
    return sd__jobsvc_job_history_len(job);
}

void sd_job_history_at(const sd_job *job, size_t i, sd_job_event *out)
{
    const sd__jobsvc_job_entry *e = sd__jobsvc_job_history_at(job, i);
    assert(e != NULL);
    out->seq = e->seq;
    out->time_ms = e->time_ms;
    out->is_state = e->is_state;
    out->value = e->value;
    out->text = e->text != NULL ? e->text : "";
}

/*
 * The Job API's Cancel. A job that never ran ends at once (nothing to stop); so does one when
 * no executor is attached. A running job goes to CANCELLING and the executor finishes it,
 * possibly from inside the hook. Repeated cancels and cancels of finished jobs change nothing.
 */
sd_job_state sd__jobsvc_cancel(sd_jobsvc *svc, sd_job *job)
{
    if (!sd_job_state_is_terminal(job->state) && job->state != SD_JOB_CANCELLING) {
        sd_job_message(job, SD_JOB_MSG_BASIC, "cancel requested");
        if (job->state == SD_JOB_STOPPED || svc->hooks.cancel == NULL) {
            /* Nothing runs yet (or nobody to tell): the job ends here. */
            sd_job_set_state(job, SD_JOB_CANCELLED);
        } else {
            sd_job_set_state(job, SD_JOB_CANCELLING);
            svc->hooks.cancel(svc->hooks.ctx, job);
        }
    }
    return job->state;
}

sd_status
sd_jobsvc_cancel_job(sd_jobsvc *svc, const char *job_id, sd_job_state *out_state, sd_err *err)
{
    sd_job *job = sd_jobsvc_find(svc, job_id);
    if (job == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "job \"%s\" not found", job_id);
    }
    *out_state = sd__jobsvc_cancel(svc, job);
    return SD_OK;
}

/*
 * Drain: a job that never ran read nothing and is DRAINED at once; a STARTING or RUNNING one
 * goes to DRAINING and the executor drains it. Repeated drains change nothing; a job being
 * cancelled or ended otherwise cannot be drained.
 */
sd_status sd__jobsvc_drain(sd_jobsvc *svc, sd_job *job, sd_job_state *out_state, sd_err *err)
{
    sd_job_state s = job->state;
    *out_state = s;
    if (s == SD_JOB_DRAINING || s == SD_JOB_DRAINED) {
        return SD_OK;
    }
    if (svc->hooks.drain == NULL) {
        return sd_err_set(err, SD_EUNIMPL, "Drain: this job service has no executor that drains");
    }
    if (sd_job_state_is_terminal(s) || s == SD_JOB_CANCELLING) {
        return sd_err_set(err, SD_ESTATE,
                          "Drain: job %s is %s; only a STOPPED, STARTING or RUNNING job can be "
                          "drained",
                          job->id, sd_job_state_name(s));
    }
    sd_job_message(job, SD_JOB_MSG_BASIC, "drain requested");
    if (s == SD_JOB_STOPPED) {
        sd_job_set_state(job, SD_JOB_DRAINED);
    } else {
        sd_job_set_state(job, SD_JOB_DRAINING);
        svc->hooks.drain(svc->hooks.ctx, job);
    }
    *out_state = job->state;
    return SD_OK;
}

sd_status
sd_jobsvc_drain_job(sd_jobsvc *svc, const char *job_id, sd_job_state *out_state, sd_err *err)
{
    sd_job *job = sd_jobsvc_find(svc, job_id);
    if (job == NULL) {
        return sd_err_set(err, SD_ENOTFOUND, "job \"%s\" not found", job_id);
    }
    return sd__jobsvc_drain(svc, job, out_state, err);
}

void sd_job_set_view(sd_job *job, void *view, void (*free_fn)(void *view))
{
    if (job->view != NULL && job->view != view && job->view_free != NULL) {
        job->view_free(job->view);
    }
    job->view = view;
    job->view_free = view != NULL ? free_fn : NULL;
}

void *sd_job_view(const sd_job *job)
{
    return job->view;
}

void sd_job_set_trace(sd_job *job, void *trace, void (*free_fn)(void *trace))
{
    if (job->trace != NULL && job->trace != trace && job->trace_free != NULL) {
        job->trace_free(job->trace);
    }
    job->trace = trace;
    job->trace_free = trace != NULL ? free_fn : NULL;
}

void *sd_job_trace(const sd_job *job)
{
    return job->trace;
}
