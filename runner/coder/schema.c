/*
 * Sundial: a bounded protobuf wire reader for Beam's Schema message.
 *
 * A row coder (beam:coder:row:v1) carries its schema as a serialized
 * org.apache.beam.model.pipeline.v1.Schema in FunctionSpec.payload. The coder library must
 * stay free of protobuf-c (the engine links it), so this file reads exactly the messages the
 * row encoding depends on, straight from the wire format:
 *
 *   Schema     1 fields (Field, repeated)  2 id (string)  4 encoding_positions_set (bool)
 *   Field      1 name (string)  3 type (FieldType)  5 encoding_position (int32)
 *   FieldType  1 nullable (bool)  oneof type_info: 2 atomic_type (enum)  3 array_type
 *              4 iterable_type  5 map_type  6 row_type  7 logical_type
 *   ArrayType / IterableType  1 element_type      MapType  1 key_type  2 value_type
 *   RowType    1 schema      LogicalType  1 urn  3 representation
 *
 * Two logical types (millis_instant, decimal) are not written as their representation; their
 * URNs are recognised here once (sd_logical_encoding in schema.h) so the coders need not
 * compare strings per value.
 *
 * Everything else (descriptions, options, ids, logical type arguments) is skipped by wire type.
 * The reader is bounded in every direction: each length is checked against the bytes left,
 * group wire types are refused, and nesting (a row inside an array inside a row ...) stops at
 * SD_SCHEMA_MAX_DEPTH so a hostile payload cannot exhaust the stack. Like protobuf, a later
 * occurrence of a singular field replaces the earlier one, and setting a different oneof member
 * discards the previous one.
 */
#include "runner/coder/schema.h"

#include <string.h>

#include "runner/base/alloc.h"

#define SD_SCHEMA_MAX_DEPTH 32

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* ------------------------------------------------------------------------------------------ */
/* Wire primitives                                                                            */
/* ------------------------------------------------------------------------------------------ */

static sd_status bad(sd_err *err, const char *what)
{
    return sd_err_set(err, SD_EPROTO, "row coder schema: %s", what);
}

static sd_status read_tag(sd_reader *r, uint32_t *field, int *wire, sd_err *err)
{
    uint64_t tag;
    if (sd_reader_varint(r, &tag) != SD_OK) {
        return bad(err, "truncated field tag");
    }
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) {
        return bad(err, "field number out of range");
    }
    *field = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    return SD_OK;
}

static sd_status skip_field(sd_reader *r, int wire, sd_err *err)
{
    uint64_t v;
    sd_bytes b;
    switch (wire) {
    case WT_VARINT:
        if (sd_reader_varint(r, &v) != SD_OK) {
            return bad(err, "truncated varint");
        }
        return SD_OK;
    case WT_I64:
        if (sd_reader_take(r, 8, &b) != SD_OK) {
            return bad(err, "truncated fixed64");
        }
        return SD_OK;
    case WT_LEN:
        if (sd_reader_lp(r, &b) != SD_OK) {
            return bad(err, "truncated length-delimited field");
        }
        return SD_OK;
    case WT_I32:
        if (sd_reader_take(r, 4, &b) != SD_OK) {
            return bad(err, "truncated fixed32");
        }
        return SD_OK;
    default:
        return bad(err, "unsupported wire type (groups are not allowed)");
    }
}

static sd_status read_len(sd_reader *r, int wire, sd_bytes *out, sd_err *err)
{
    if (wire != WT_LEN) {
        return bad(err, "expected a length-delimited field");
    }
    if (sd_reader_lp(r, out) != SD_OK) {
        return bad(err, "truncated length-delimited field");
    }
    return SD_OK;
}

static sd_status read_varint(sd_reader *r, int wire, uint64_t *out, sd_err *err)
{
    if (wire != WT_VARINT) {
        return bad(err, "expected a varint field");
    }
    if (sd_reader_varint(r, out) != SD_OK) {
        return bad(err, "truncated varint");
    }
    return SD_OK;
}

static sd_status read_string(sd_reader *r, int wire, char **out, sd_err *err)
{
    sd_bytes b;
    sd_status st = read_len(r, wire, &b, err);
    if (st != SD_OK) {
        return st;
    }
    if (memchr(b.ptr, 0, b.len) != NULL) {
        return bad(err, "string contains a NUL byte");
    }
    char *s = sd_strndup(b.len ? (const char *)b.ptr : "", b.len);
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "row coder schema: out of memory");
    }
    sd_free(*out);
    *out = s;
    return SD_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Freeing                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void field_type_destroy(sd_field_type *t);

static void field_type_clear_info(sd_field_type *t)
{
    field_type_destroy(t->element);
    field_type_destroy(t->value);
    sd_schema_destroy(t->row);
    sd_free(t->logical_urn);
    field_type_destroy(t->repr);
    t->element = t->value = t->repr = NULL;
    t->row = NULL;
    t->logical_urn = NULL;
    t->atomic = SD_ATOMIC_UNSPECIFIED;
    t->logical = SD_LOGICAL_AS_REPR;
    t->kind = SD_FIELD_NONE;
}

static void field_type_destroy(sd_field_type *t)
{
    if (t == NULL) {
        return;
    }
    field_type_clear_info(t);
    sd_free(t);
}

void sd_schema_destroy(sd_schema *s)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->n_fields; i++) {
        sd_free(s->fields[i].name);
        field_type_destroy(s->fields[i].type);
    }
    sd_free(s->fields);
    sd_free(s->id);
    sd_free(s->order);
    sd_free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Messages                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static sd_status parse_schema(sd_bytes data, int depth, sd_schema **out, sd_err *err);
static sd_status parse_field_type(sd_bytes data, int depth, sd_field_type **out, sd_err *err);

/* Parse a message holding one FieldType at field number `want` (ArrayType, IterableType). */
static sd_status
parse_wrapped_type(sd_bytes data, int depth, uint32_t want, sd_field_type **out, sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    while (!sd_reader_done(&r)) {
        uint32_t f = 0;
        int w = 0;
        sd_status st = read_tag(&r, &f, &w, err);
        if (st != SD_OK) {
            return st;
        }
        if (f == want) {
            sd_bytes sub;
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            sd_field_type *t = NULL;
            if ((st = parse_field_type(sub, depth + 1, &t, err)) != SD_OK) {
                return st;
            }
            field_type_destroy(*out);
            *out = t;
        } else if ((st = skip_field(&r, w, err)) != SD_OK) {
            return st;
        }
    }
    return SD_OK;
}

static sd_status parse_map_type(sd_bytes data, int depth, sd_field_type *t, sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    while (!sd_reader_done(&r)) {
        uint32_t f = 0;
        int w = 0;
        sd_status st = read_tag(&r, &f, &w, err);
        if (st != SD_OK) {
            return st;
        }
        if (f == 1 || f == 2) {
            sd_bytes sub;
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            sd_field_type *sub_t = NULL;
            if ((st = parse_field_type(sub, depth + 1, &sub_t, err)) != SD_OK) {
                return st;
            }
            sd_field_type **slot = f == 1 ? &t->element : &t->value;
            field_type_destroy(*slot);
            *slot = sub_t;
        } else if ((st = skip_field(&r, w, err)) != SD_OK) {
            return st;
        }
    }
    if (t->element == NULL || t->value == NULL) {
        return bad(err, "map type without key_type and value_type");
    }
    return SD_OK;
}

/*
 * Set t->logical from the URN (see sd_logical_encoding). The two special encodings only make
 * sense for the representation Beam defines, so another one is refused rather than guessed at.
 */
static sd_status classify_logical(sd_field_type *t, sd_err *err)
{
    static const struct {
        const char *urn;
        sd_logical_encoding encoding;
        sd_atomic_type repr;
        const char *repr_name;
    } special[] = {
        { SD_LOGICAL_URN_MILLIS_INSTANT, SD_LOGICAL_MILLIS_INSTANT, SD_ATOMIC_INT64, "INT64" },
        { SD_LOGICAL_URN_DECIMAL, SD_LOGICAL_DECIMAL, SD_ATOMIC_BYTES, "BYTES" },
    };

    t->logical = SD_LOGICAL_AS_REPR;
    for (size_t i = 0; t->logical_urn != NULL && i < sizeof(special) / sizeof(special[0]); i++) {
        if (strcmp(t->logical_urn, special[i].urn) != 0) {
            continue;
        }
        if (t->repr->kind != SD_FIELD_ATOMIC || t->repr->atomic != special[i].repr) {
            return sd_err_set(err, SD_EPROTO,
                              "row coder schema: logical type %s must have representation %s",
                              special[i].urn, special[i].repr_name);
        }
        t->logical = special[i].encoding;
    }
    return SD_OK;
}

static sd_status parse_logical_type(sd_bytes data, int depth, sd_field_type *t, sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    while (!sd_reader_done(&r)) {
        uint32_t f = 0;
        int w = 0;
        sd_status st = read_tag(&r, &f, &w, err);
        if (st != SD_OK) {
            return st;
        }
        if (f == 1) {
            if ((st = read_string(&r, w, &t->logical_urn, err)) != SD_OK) {
                return st;
            }
        } else if (f == 3) {
            sd_bytes sub;
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            sd_field_type *repr = NULL;
            if ((st = parse_field_type(sub, depth + 1, &repr, err)) != SD_OK) {
                return st;
            }
            field_type_destroy(t->repr);
            t->repr = repr;
        } else if ((st = skip_field(&r, w, err)) != SD_OK) {
            return st;
        }
    }
    if (t->repr == NULL) {
        t->logical = SD_LOGICAL_OPAQUE; /* see schema.h: readable only by its SDK */
        return SD_OK;
    }
    return classify_logical(t, err);
}

static sd_status parse_field_type_into(sd_bytes data, int depth, sd_field_type *t, sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    while (!sd_reader_done(&r)) {
        uint32_t f = 0;
        int w = 0;
        uint64_t v;
        sd_bytes sub;
        sd_status st = read_tag(&r, &f, &w, err);
        if (st != SD_OK) {
            return st;
        }
        switch (f) {
        case 1:
            if ((st = read_varint(&r, w, &v, err)) != SD_OK) {
                return st;
            }
            t->nullable = v != 0;
            break;
        case 2:
            if ((st = read_varint(&r, w, &v, err)) != SD_OK) {
                return st;
            }
            field_type_clear_info(t);
            t->kind = SD_FIELD_ATOMIC;
            if (v < SD_ATOMIC_BYTE || v > SD_ATOMIC_BYTES) {
                return sd_err_set(err, SD_EPROTO,
                                  "row coder schema: unknown atomic type %llu (expected 1..9)",
                                  (unsigned long long)v);
            }
            t->atomic = (sd_atomic_type)v;
            break;
        case 3:
        case 4:
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            field_type_clear_info(t);
            t->kind = f == 3 ? SD_FIELD_ARRAY : SD_FIELD_ITERABLE;
            if ((st = parse_wrapped_type(sub, depth, 1, &t->element, err)) != SD_OK) {
                return st;
            }
            if (t->element == NULL) {
                return bad(err, "array/iterable type without element_type");
            }
            break;
        case 5:
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            field_type_clear_info(t);
            t->kind = SD_FIELD_MAP;
            if ((st = parse_map_type(sub, depth, t, err)) != SD_OK) {
                return st;
            }
            break;
        case 6: {
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            field_type_clear_info(t);
            t->kind = SD_FIELD_ROW;
            /* RowType { 1: schema }: find the last schema field. */
            sd_reader rr = sd_reader_make(sub);
            sd_bytes schema_bytes = SD_BYTES_NULL;
            bool found = false;
            while (!sd_reader_done(&rr)) {
                uint32_t rf = 0;
                int rw = 0;
                if ((st = read_tag(&rr, &rf, &rw, err)) != SD_OK) {
                    return st;
                }
                if (rf == 1) {
                    if ((st = read_len(&rr, rw, &schema_bytes, err)) != SD_OK) {
                        return st;
                    }
                    found = true;
                } else if ((st = skip_field(&rr, rw, err)) != SD_OK) {
                    return st;
                }
            }
            if (!found) {
                return bad(err, "row type without schema");
            }
            if ((st = parse_schema(schema_bytes, depth + 1, &t->row, err)) != SD_OK) {
                return st;
            }
            break;
        }
        case 7:
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            field_type_clear_info(t);
            t->kind = SD_FIELD_LOGICAL;
            if ((st = parse_logical_type(sub, depth, t, err)) != SD_OK) {
                return st;
            }
            break;
        default:
            if ((st = skip_field(&r, w, err)) != SD_OK) {
                return st;
            }
        }
    }
    if (t->kind == SD_FIELD_NONE) {
        return bad(err, "field type without a type (expected atomic, array, iterable, map, row or "
                        "logical type)");
    }
    return SD_OK;
}

static sd_status parse_field_type(sd_bytes data, int depth, sd_field_type **out, sd_err *err)
{
    if (depth > SD_SCHEMA_MAX_DEPTH) {
        return bad(err, "types nested too deeply (more than 32 levels)");
    }
    sd_field_type *t = sd_calloc(1, sizeof(*t));
    if (t == NULL) {
        return sd_err_set(err, SD_ENOMEM, "row coder schema: out of memory");
    }
    sd_status st = parse_field_type_into(data, depth, t, err);
    if (st != SD_OK) {
        field_type_destroy(t);
        return st;
    }
    *out = t;
    return SD_OK;
}

static sd_status parse_field(sd_bytes data, int depth, sd_schema_field *fld, sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    while (!sd_reader_done(&r)) {
        uint32_t f = 0;
        int w = 0;
        uint64_t v;
        sd_bytes sub;
        sd_status st = read_tag(&r, &f, &w, err);
        if (st != SD_OK) {
            return st;
        }
        if (f == 1) {
            if ((st = read_string(&r, w, &fld->name, err)) != SD_OK) {
                return st;
            }
        } else if (f == 3) {
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            sd_field_type *t = NULL;
            if ((st = parse_field_type(sub, depth + 1, &t, err)) != SD_OK) {
                return st;
            }
            field_type_destroy(fld->type);
            fld->type = t;
        } else if (f == 5) {
            if ((st = read_varint(&r, w, &v, err)) != SD_OK) {
                return st;
            }
            fld->encoding_position = (int32_t)(uint32_t)v;
        } else if ((st = skip_field(&r, w, err)) != SD_OK) {
            return st;
        }
    }
    if (fld->name == NULL) {
        fld->name = sd_strdup("");
        if (fld->name == NULL) {
            return sd_err_set(err, SD_ENOMEM, "row coder schema: out of memory");
        }
    }
    if (fld->type == NULL) {
        return sd_err_set(err, SD_EPROTO, "row coder schema: field \"%s\" has no type", fld->name);
    }
    return SD_OK;
}

/* Compute the wire order: by encoding_position when set, else schema order. */
static sd_status compute_order(sd_schema *s, sd_err *err)
{
    if (s->n_fields == 0) {
        return SD_OK;
    }
    s->order = sd_calloc(s->n_fields, sizeof(size_t));
    if (s->order == NULL) {
        return sd_err_set(err, SD_ENOMEM, "row coder schema: out of memory");
    }
    if (!s->encoding_positions_set) {
        for (size_t i = 0; i < s->n_fields; i++) {
            s->order[i] = i;
        }
        return SD_OK;
    }
    /* Positions must be a permutation of 0..n-1; anything else is ambiguous on the wire. */
    for (size_t i = 0; i < s->n_fields; i++) {
        s->order[i] = SIZE_MAX;
    }
    for (size_t i = 0; i < s->n_fields; i++) {
        int32_t pos = s->fields[i].encoding_position;
        if (pos < 0 || (size_t)pos >= s->n_fields || s->order[pos] != SIZE_MAX) {
            return sd_err_set(err, SD_EPROTO,
                              "row coder schema %s: field \"%s\" has encoding position %d "
                              "(expected a distinct position in 0..%zu)",
                              s->id ? s->id : "", s->fields[i].name, (int)pos, s->n_fields - 1);
        }
        s->order[pos] = i;
    }
    return SD_OK;
}

static sd_status parse_schema_into(sd_bytes data, int depth, sd_schema *s, sd_err *err)
{
    sd_reader r = sd_reader_make(data);
    size_t cap = 0;
    while (!sd_reader_done(&r)) {
        uint32_t f = 0;
        int w = 0;
        uint64_t v;
        sd_bytes sub;
        sd_status st = read_tag(&r, &f, &w, err);
        if (st != SD_OK) {
            return st;
        }
        if (f == 1) {
            if ((st = read_len(&r, w, &sub, err)) != SD_OK) {
                return st;
            }
            if (s->n_fields == cap) {
                size_t ncap = cap ? cap * 2 : 4;
                sd_schema_field *nf = sd_realloc(s->fields, ncap * sizeof(*nf));
                if (nf == NULL) {
                    return sd_err_set(err, SD_ENOMEM, "row coder schema: out of memory");
                }
                s->fields = nf;
                cap = ncap;
            }
            sd_schema_field *fld = &s->fields[s->n_fields++];
            memset(fld, 0, sizeof(*fld));
            if ((st = parse_field(sub, depth, fld, err)) != SD_OK) {
                return st;
            }
        } else if (f == 2) {
            if ((st = read_string(&r, w, &s->id, err)) != SD_OK) {
                return st;
            }
        } else if (f == 4) {
            if ((st = read_varint(&r, w, &v, err)) != SD_OK) {
                return st;
            }
            s->encoding_positions_set = v != 0;
        } else if ((st = skip_field(&r, w, err)) != SD_OK) {
            return st;
        }
    }
    if (s->id == NULL) {
        s->id = sd_strdup("");
        if (s->id == NULL) {
            return sd_err_set(err, SD_ENOMEM, "row coder schema: out of memory");
        }
    }
    return compute_order(s, err);
}

static sd_status parse_schema(sd_bytes data, int depth, sd_schema **out, sd_err *err)
{
    if (depth > SD_SCHEMA_MAX_DEPTH) {
        return bad(err, "rows nested too deeply (more than 32 levels)");
    }
    sd_schema *s = sd_calloc(1, sizeof(*s));
    if (s == NULL) {
        return sd_err_set(err, SD_ENOMEM, "row coder schema: out of memory");
    }
    sd_status st = parse_schema_into(data, depth, s, err);
    if (st != SD_OK) {
        sd_schema_destroy(s);
        return st;
    }
    *out = s;
    return SD_OK;
}

sd_status sd_schema_parse(sd_bytes data, sd_schema **out, sd_err *err)
{
    *out = NULL;
    return parse_schema(data, 0, out, err);
}
