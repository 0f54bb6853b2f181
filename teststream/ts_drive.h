/* Sundial TestStream: the driver that plays TestStreams into the engine at quiescence. */
#ifndef SD_TESTSTREAM_TS_DRIVE_H
#define SD_TESTSTREAM_TS_DRIVE_H

#include "runner/base/err.h"
#include "runner/base/status.h"
#include "runner/engine/em.h"
#include "teststream/ts.h"

/*
 * The driver of a job's TestStreams: it installs itself as the engine's source driver
 * (sd_em_set_source) and plays every stream added to it, one event per call, whenever the
 * engine is quiescent; a live stream's events arrive while the job runs (sd_ts_driver_set_live).
 * Several streams share the job's one processing-time clock (ts_drive.c says how their events
 * merge). Engine thread only.
 */
typedef struct sd_ts_driver sd_ts_driver;

/*
 * Create em's TestStream driver and install it (before sd_em_start; at most one per engine).
 * OUT: out (borrowed: the engine owns it and frees it in sd_em_destroy). SD_ENOMEM, or
 * sd_em_set_source's errors.
 */
SD_MUST_CHECK sd_status sd_ts_driver_create(sd_em *em, sd_ts_driver **out, sd_err *err);

/*
 * Play stream as the TESTSTREAM stage stage_id of the engine, its output i feeding the
 * engine's PCollection pcollections[i] (an output of that stage). Takes ownership of stream
 * (on error too). Events may still be appended to the stream until sd_em_start; streams added
 * earlier win ties. Every TESTSTREAM stage needs a stream (one with no events just ends).
 * SD_ENOTFOUND (unknown stage or output, named), SD_EEXIST (the stage has a stream),
 * SD_ENOMEM.
 */
SD_MUST_CHECK sd_status sd_ts_driver_add(sd_ts_driver *d,
                                         const char *stage_id,
                                         sd_ts_stream *stream,
                                         const char *const *pcollections,
                                         sd_err *err);

/*
 * A live stream (a TestStream reading a TestStreamService): while live, the stream of stage_id
 * is open — once its events so far are played, the driver is not ready (sd_em_source.ready)
 * and the engine waits, neither done nor stuck, for more events (appended to the stream with
 * teststream/ts_pb.h's sd_ts_decode_event) or for the end (live = false: the service said it
 * is over; its end step follows). Draining ends it too. SD_ENOTFOUND for an unknown stage.
 */
SD_MUST_CHECK sd_status sd_ts_driver_set_live(sd_ts_driver *d,
                                              const char *stage_id,
                                              bool live,
                                              sd_err *err);

/* The stream added for stage_id (borrowed, owned by the driver), or NULL. */
sd_ts_stream *sd_ts_driver_stream(const sd_ts_driver *d, const char *stage_id);

#endif
