/*
 * Sundial: the user-state kinds, one table for the planner, the executor and the C SDK.
 *
 * A ParDo declares each of its states with a StateSpec: one member of the spec's oneof (bag,
 * value, combining, map, set, ordered list, multimap) naming the coders, and a protocol URN.
 * At run time an SDK reads and writes the state through the State API with a StateKey of one
 * of three user-state families, which the executor (exec/exec_state.c) serves from the engine:
 *
 *   key family    StateKey cases                              engine calls
 *   BAG           bag_user_state                              sd_em_user_state_get/_append/
 *                                                             _clear (no map key)
 *   MULTIMAP      multimap_user_state, multimap_keys_user_    sd_em_user_state_* with a map
 *                 state, multimap_entries_user_state          key, _keys, _entries
 *   ORDERED_LIST  ordered_list_user_state                     sd_em_ordered_list_get/_append/
 *                                                             _clear
 *
 * Each row of SD_STATE_KINDS says, for one kind:
 *
 *   ID           the kind's name in C: SD_USER_STATE_<ID>
 *   NAME         its name in messages ("ordered-list")
 *   SPEC, CASE   the StateSpec oneof member (bag_spec) and its case suffix (BAG_SPEC): with
 *                proto/state_spec.h they become ss->bag_spec and
 *                ORG__APACHE__BEAM__MODEL__PIPELINE__V1__STATE_SPEC__SPEC_BAG_SPEC
 *   VALUE_CODER  the member's field naming the values' coder (a combining state's values are
 *                its accumulators)
 *   KEY_CODER    the member's field naming the map keys' coder, or none
 *   PROTOCOL     the protocol URN an SDK declares for the kind (the planner accepts the URNs
 *                of this column and no other)
 *   KEY          the StateKey family its values travel on (above)
 *   SDK          the C SDK's public enum constant (<sundial/sundial.h> sd_state_kind), or -1
 *                when the C SDK does not offer the kind; only the SDK's sources expand it
 *
 * Adding a kind is a row here; CONTRIBUTING.md walks through the rest. Pure C (no protobuf-c):
 * the expansions that reach the generated protobuf-c names live in proto/state_spec.h.
 */
#ifndef SD_RUNNER_URNS_STATE_KINDS_H
#define SD_RUNNER_URNS_STATE_KINDS_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "runner/urns/urns.h"

/* clang-format off */
/*     ID            NAME            SPEC                    CASE                    VALUE_CODER           KEY_CODER     PROTOCOL                        KEY           SDK */
#define SD_STATE_KINDS(X) \
    X(BAG,           "bag",          bag_spec,               BAG_SPEC,               element_coder_id,     none,         SD_URN_USER_STATE_BAG,          BAG,          SD_STATE_BAG) \
    X(VALUE,         "value",        read_modify_write_spec, READ_MODIFY_WRITE_SPEC, coder_id,             none,         SD_URN_USER_STATE_BAG,          BAG,          SD_STATE_VALUE) \
    X(COMBINING,     "combining",    combining_spec,         COMBINING_SPEC,         accumulator_coder_id, none,         SD_URN_USER_STATE_BAG,          BAG,          SD_STATE_COMBINING) \
    X(MAP,           "map",          map_spec,               MAP_SPEC,               value_coder_id,       key_coder_id, SD_URN_USER_STATE_MULTIMAP,     MULTIMAP,     SD_STATE_MAP) \
    X(SET,           "set",          set_spec,               SET_SPEC,               element_coder_id,     none,         SD_URN_USER_STATE_MULTIMAP,     MULTIMAP,     SD_STATE_SET) \
    X(ORDERED_LIST,  "ordered-list", ordered_list_spec,      ORDERED_LIST_SPEC,      element_coder_id,     none,         SD_URN_USER_STATE_ORDERED_LIST, ORDERED_LIST, SD_STATE_ORDERED_LIST) \
    X(MULTIMAP,      "multimap",     multimap_spec,          MULTIMAP_SPEC,          value_coder_id,       key_coder_id, SD_URN_USER_STATE_MULTIMAP,     MULTIMAP,     -1)

/* clang-format on */

/* The kinds, in table order. */
typedef enum sd_user_state_kind {

#define SD__STATE_KIND_ENUM(ID, ...) SD_USER_STATE_##ID,
    SD_STATE_KINDS(SD__STATE_KIND_ENUM)
#undef SD__STATE_KIND_ENUM
        SD_USER_STATE_KIND_COUNT
} sd_user_state_kind;

/* The StateKey family a kind's values travel on (the KEY column). */
typedef enum sd_state_key_family {
    SD_STATE_KEY_BAG,
    SD_STATE_KEY_MULTIMAP,
    SD_STATE_KEY_ORDERED_LIST
} sd_state_key_family;

/* One row's plain-C columns. */
typedef struct sd_user_state_row {
    const char *name;
    const char *protocol;
    sd_state_key_family key;
    bool keyed; /* KEY_CODER is a field, not none */
} sd_user_state_row;

#define SD__STATE_KEYED_none         false
#define SD__STATE_KEYED_key_coder_id true
#define SD__STATE_KEYED(kc)          SD__STATE_KEYED_##kc

/* The row of kind k. Borrowed: static storage. k must be a valid kind (any other value reads
 * the first row rather than outside the table). */
static inline const sd_user_state_row *sd_user_state_row_of(sd_user_state_kind k)
{
    static const sd_user_state_row rows[SD_USER_STATE_KIND_COUNT] = {
#define SD__STATE_KIND_ROW(ID, NAME, SPEC, CASE, VC, KC, PROTOCOL, KEY, SDK) \
    { NAME, PROTOCOL, SD_STATE_KEY_##KEY, SD__STATE_KEYED(KC) },
        SD_STATE_KINDS(SD__STATE_KIND_ROW)
#undef SD__STATE_KIND_ROW
    };
    return &rows[(size_t)k < SD_USER_STATE_KIND_COUNT ? (size_t)k : 0];
}

/* The kind's name in messages ("ordered-list"). */
static inline const char *sd_user_state_name(sd_user_state_kind k)
{
    return sd_user_state_row_of(k)->name;
}

/* Whether urn is the PROTOCOL of some kind (a StateSpec protocol the runner serves). */
static inline bool sd_user_state_protocol_known(const char *urn)
{
    for (int k = 0; k < (int)SD_USER_STATE_KIND_COUNT; k++) {
        if (strcmp(sd_user_state_row_of((sd_user_state_kind)k)->protocol, urn) == 0) {
            return true;
        }
    }
    return false;
}

#endif /* SD_RUNNER_URNS_STATE_KINDS_H */
