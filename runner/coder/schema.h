/* Sundial: Beam row schemas, read from the serialized Schema proto in a row coder's payload. */
#ifndef SD_RUNNER_CODER_SCHEMA_H
#define SD_RUNNER_CODER_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runner/base/buf.h"
#include "runner/base/err.h"

/* AtomicType enum numbers (schema.proto). */
typedef enum sd_atomic_type {
    SD_ATOMIC_UNSPECIFIED = 0,
    SD_ATOMIC_BYTE = 1,
    SD_ATOMIC_INT16 = 2,
    SD_ATOMIC_INT32 = 3,
    SD_ATOMIC_INT64 = 4,
    SD_ATOMIC_FLOAT = 5,
    SD_ATOMIC_DOUBLE = 6,
    SD_ATOMIC_STRING = 7,
    SD_ATOMIC_BOOLEAN = 8,
    SD_ATOMIC_BYTES = 9
} sd_atomic_type;

/* Which member of FieldType.type_info is set. */
typedef enum sd_field_type_kind {
    SD_FIELD_NONE = 0, /* no type_info: rejected by sd_schema_parse */
    SD_FIELD_ATOMIC,
    SD_FIELD_ARRAY,
    SD_FIELD_ITERABLE,
    SD_FIELD_MAP,
    SD_FIELD_ROW,
    SD_FIELD_LOGICAL
} sd_field_type_kind;

/*
 * How a logical type field is written. Most logical types are written exactly as their
 * representation type. Two standard ones are not: the Java SDK writes its DATETIME and DECIMAL
 * field types (which travel as these logical types) with InstantCoder and BigDecimalCoder, and
 * the Python SDK matches it, so Beam's cross-SDK vectors use those encodings:
 *   beam:logical_type:millis_instant:v1  8-byte big-endian millis with the sign bit flipped
 *                                        (like every Beam timestamp); representation INT64
 *   beam:logical_type:decimal:v1         varint(scale) then the unscaled value as nested
 *                                        bytes (minimal big-endian two's complement);
 *                                        representation BYTES
 * sd_schema_parse sets the encoding from the URN and checks the representation it requires.
 * A logical type given without a representation (Python's beam:logical:pythonsdk_any:v1 for
 * a field typed Any, written by the SDK's own pickling coder) is SD_LOGICAL_OPAQUE: the schema
 * parses, but a value of it cannot be skipped, decoded or encoded here (a clear error). The
 * planner length-prefixes every row coder, so the runner never needs to read inside one; only
 * a caller that decodes rows itself meets the error.
 */
typedef enum sd_logical_encoding {
    SD_LOGICAL_AS_REPR = 0, /* written as the representation type */
    SD_LOGICAL_MILLIS_INSTANT,
    SD_LOGICAL_DECIMAL,
    SD_LOGICAL_OPAQUE /* no representation: only the SDK that wrote it can read it */
} sd_logical_encoding;

#define SD_LOGICAL_URN_MILLIS_INSTANT "beam:logical_type:millis_instant:v1"
#define SD_LOGICAL_URN_DECIMAL        "beam:logical_type:decimal:v1"

struct sd_schema;

typedef struct sd_field_type {
    sd_field_type_kind kind;
    bool nullable;
    sd_atomic_type atomic;         /* ATOMIC */
    struct sd_field_type *element; /* ARRAY, ITERABLE: element; MAP: key */
    struct sd_field_type *value;   /* MAP: value */
    struct sd_schema *row;         /* ROW */
    char *logical_urn;             /* LOGICAL (owned) */
    struct sd_field_type *repr;    /* LOGICAL: representation */
    sd_logical_encoding logical;   /* LOGICAL: how the value is written */
} sd_field_type;

typedef struct sd_schema_field {
    char *name; /* owned, never NULL */
    sd_field_type *type;
    int32_t encoding_position;
} sd_schema_field;

/*
 * A parsed Schema. order[j] is the index of the field written j-th on the wire (schema order
 * unless encoding_positions_set).
 */
typedef struct sd_schema {
    sd_schema_field *fields;
    size_t n_fields;
    char *id; /* owned, may be "" */
    bool encoding_positions_set;
    size_t *order;
} sd_schema;

/*
 * Parse a serialized Schema message. Bounded: nesting deeper than 32 levels, truncated or
 * malformed wire data, a field type without type_info, duplicate or out-of-range encoding
 * positions, and a millis_instant / decimal logical type whose representation is not INT64 /
 * BYTES are SD_EPROTO. Unknown fields are skipped. OUT: out (caller owns; free with
 * sd_schema_destroy).
 */
SD_MUST_CHECK sd_status sd_schema_parse(sd_bytes data, sd_schema **out, sd_err *err);

/* Free a schema. NULL is a no-op. */
void sd_schema_destroy(sd_schema *s);

#endif
