/*
 * Sundial: a StateSpec read and filled through the state kinds table
 * (runner/urns/state_kinds.h), for the layers that see protobuf-c: the planner, the executor
 * and the C SDK. No switch over the StateSpec oneof is written anywhere else.
 */
#ifndef SD_PROTO_STATE_SPEC_H
#define SD_PROTO_STATE_SPEC_H

#include "proto/pb.h"
#include "runner/urns/state_kinds.h"

typedef SD_PL(StateSpec) pb_StateSpec;

/* The generated name of a row's CASE column. */
#define SD_PB_STATE_SPEC_CASE(CASE) ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_##CASE

/*
 * A StateSpec as the table sees it: its kind, and where its coder ids are (pointers into the
 * spec's oneof member, so the same view reads a received spec and fills a new one).
 */
typedef struct sd_pb_state_view {
    sd_user_state_kind kind;
    char **value_coder_id; /* the VALUE_CODER field */
    char **key_coder_id;   /* the KEY_CODER field; NULL for kinds without map keys */
} sd_pb_state_view;

#define SD__PB_STATE_KEY_FIELD_none(m)         NULL
#define SD__PB_STATE_KEY_FIELD_key_coder_id(m) (&(m)->key_coder_id)

/*
 * View ss (not NULL). False, with *out untouched, when its oneof is unset, names a kind the
 * table has no row for, or its member is missing.
 */
static inline bool sd_pb_state_view_of(const pb_StateSpec *ss, sd_pb_state_view *out)
{
    switch (ss->spec_case) {
#define SD__PB_STATE_VIEW(ID, NAME, SPEC, CASE, VC, KC, PROTOCOL, KEY, SDK) \
    case SD_PB_STATE_SPEC_CASE(CASE):                                       \
        if (ss->SPEC == NULL) {                                             \
            return false;                                                   \
        }                                                                   \
        out->kind = SD_USER_STATE_##ID;                                     \
        out->value_coder_id = &ss->SPEC->VC;                                \
        out->key_coder_id = SD__PB_STATE_KEY_FIELD_##KC(ss->SPEC);          \
        return true;
        SD_STATE_KINDS(SD__PB_STATE_VIEW)
#undef SD__PB_STATE_VIEW
    default:
        return false;
    }
}

/*
 * The coder ids ss names, map keys first: ids[0] is the key coder of a keyed kind, else the
 * value coder; ids[1] is then the value coder, else NULL. Both NULL when ss cannot be viewed.
 */
static inline void sd_pb_state_coder_ids(const pb_StateSpec *ss, const char *ids[2])
{
    sd_pb_state_view v;
    ids[0] = NULL;
    ids[1] = NULL;
    if (ss == NULL || !sd_pb_state_view_of(ss, &v)) {
        return;
    }
    if (v.key_coder_id != NULL) {
        ids[0] = *v.key_coder_id;
        ids[1] = *v.value_coder_id;
    } else {
        ids[0] = *v.value_coder_id;
    }
}

/* The StateSpec oneof case of kind k (to fill a spec: the member's field number). */
static inline int sd_pb_state_spec_case(sd_user_state_kind k)
{
    static const int cases[SD_USER_STATE_KIND_COUNT] = {
#define SD__PB_STATE_CASE(ID, NAME, SPEC, CASE, ...) \
    [SD_USER_STATE_##ID] = SD_PB_STATE_SPEC_CASE(CASE),
        SD_STATE_KINDS(SD__PB_STATE_CASE)
#undef SD__PB_STATE_CASE
    };
    return cases[(size_t)k < SD_USER_STATE_KIND_COUNT ? (size_t)k : 0];
}

#endif /* SD_PROTO_STATE_SPEC_H */
