/* Sundial: the table of the runner's own pipeline options (see options.h). */
#include "runner/jobservice/options.h"

#include <stdbool.h>
#include <string.h>

static const sd_option_info k_options[] = {
    { "sundial_clock", SD_OPTION_ENUM, "synthetic|wall",
      "The job's processing-time clock: synthetic (jumps to the next timer when nothing runs) "
      "or wall; default: the server's --clock." },
    { "sundial_bundle_shape", SD_OPTION_ENUM, "greedy|one_key|one_element",
      "How the engine cuts bundles (schedule exploration); default greedy." },
    { "sundial_schedule_seed", SD_OPTION_INT, NULL,
      "Shuffles the engine's scheduling choices with this seed (0 = none)." },
    { "sundial_record_schedule", SD_OPTION_STRING, NULL,
      "Record the run's schedule to this file." },
    { "sundial_replay_schedule", SD_OPTION_STRING, NULL,
      "Replay the schedule in this file; the job fails at the first step that differs." },
    { "sundial_explore_seeds", SD_OPTION_INT, NULL,
      "Run the job up to 3K times (seeds 1..K, each bundle shape) and fail at the first run "
      "whose result differs." },
    { "sundial_explore_dir", SD_OPTION_STRING, NULL,
      "Where schedule exploration records each run's schedule." },
    { "sundial_livelock_rounds", SD_OPTION_INT, NULL,
      "SDK bundles in a row without progress before the job fails as live-locked "
      "(0 = never); default: the server's --livelock-rounds." },
    { "sundial_memory_limit", SD_OPTION_SIZE, NULL,
      "The job's memory budget (4096, 512MiB, 2G; 0 = none); beyond it data is spilled; "
      "default: the server's --memory_limit." },
    { "sundial_trace_cap", SD_OPTION_INT, NULL,
      "Records the job's time trace keeps (at least 2; the last is the cut mark); default "
      "100000 on the test clock, 20000 on the wall clock." },
    { "sundial_spill_dir", SD_OPTION_STRING, NULL,
      "Where the job spills; default: the server's --spill_dir, else $TMPDIR, else /tmp." },
    { "sundial_lift_combiners", SD_OPTION_BOOL, NULL,
      "false runs combines unlifted; true also lifts those a known SDK defect would make "
      "wrong." },
    { "sundial_embed_input", SD_OPTION_BOOL, NULL,
      "false sends every bundle's input over the data stream; default true." },
    { "sundial_cache_tokens", SD_OPTION_BOOL, NULL,
      "false sends stateful stages no user-state cache token (SDKs then keep no user state "
      "from one bundle to the next); default true." },
    { "sundial_sdf_checkpoint_ms", SD_OPTION_INT, NULL,
      "Milliseconds between the runner's checkpoint requests to a splittable DoFn "
      "(0 = never)." },
    { "sundial_drop_late_elements", SD_OPTION_STRING, NULL,
      "Comma-separated transform names: elements behind their input's watermark on arrival "
      "at those transforms are dropped and counted." },
    { "sundial_late_data_dir", SD_OPTION_STRING, NULL,
      "A directory where every element treated as late is written, one JSON line each, in "
      "<transform>.jsonl." },
    { "sundial_keep_artifacts", SD_OPTION_BOOL, NULL,
      "Keep the job's staged artifacts after it ends; default false." },
    { "sundial_pause", SD_OPTION_ENUM, "start|event|none",
      "Start the job paused (start) or pause it before its first TestStream event (event); "
      "step and inspect it over /api/jobs/ID/... (synthetic clock only)." },
    { "sundial_pause_at", SD_OPTION_STRING, NULL,
      "Pause the job before its clock passes this RFC 3339 time, or +DURATION from its "
      "start (+59m)." },
    { "sundial_tap", SD_OPTION_BOOL, NULL,
      "Keep what is delivered into each PCollection for /api/jobs/ID/elements (on with any "
      "pause option); default false." },
};

const sd_option_info *sd_option_table(size_t *n)
{
    *n = sizeof k_options / sizeof k_options[0];
    return k_options;
}

const char *sd_option_kind_name(sd_option_kind kind)
{
    switch (kind) {
    case SD_OPTION_STRING:
        return "string";
    case SD_OPTION_ENUM:
        return "enum";
    case SD_OPTION_INT:
        return "int";
    case SD_OPTION_SIZE:
        return "size";
    case SD_OPTION_BOOL:
        return "bool";
    }
    return "string";
}

/* The table's texts are ours and hold no character JSON must escape but '"' and '\\'. */
static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\') {
            fputc('\\', f);
        }
        fputc(*s, f);
    }
    fputc('"', f);
}

int sd_option_table_write_json(FILE *f)
{
    size_t n;
    const sd_option_info *t = sd_option_table(&n);
    fputs("{\"options\": [", f);
    for (size_t i = 0; i < n; i++) {
        fputs(i == 0 ? "\n  {\"name\": " : ",\n  {\"name\": ", f);
        put_json_string(f, t[i].name);
        fprintf(f, ", \"urn\": \"beam:option:%s:v1\", \"kind\": \"%s\"", t[i].name,
                sd_option_kind_name(t[i].kind));
        if (t[i].choices != NULL) {
            fputs(", \"choices\": [", f);
            const char *c = t[i].choices;
            bool first = true;
            while (*c != '\0') {
                size_t len = strcspn(c, "|");
                fprintf(f, "%s\"%.*s\"", first ? "" : ", ", (int)len, c);
                first = false;
                c += len;
                if (*c == '|') {
                    c++;
                }
            }
            fputc(']', f);
        }
        fputs(", \"help\": ", f);
        put_json_string(f, t[i].help);
        fputc('}', f);
    }
    fputs("\n]}\n", f);
    return ferror(f) ? -1 : 0;
}
