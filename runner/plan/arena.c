/*
 * Sundial planner: protobuf-c on arenas.
 *
 * The planner's two lifetimes (one build call's scratch, and the plan) each get a base arena
 * (runner/base/arena.h). A ProtobufCAllocator backed by an arena lets descriptors be unpacked
 * into the plan with no protobuf_c_message_free_unpacked: dropping the arena frees them.
 */
#include "runner/base/arena.h"

#include "runner/plan/plan_int.h"

static void *pb_arena_alloc(void *data, size_t size)
{
    return sd_arena_alloc(data, size);
}

static void pb_arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

ProtobufCAllocator sd__plan_arena_pb(sd_arena *a)
{
    return (
        ProtobufCAllocator){ .alloc = pb_arena_alloc, .free = pb_arena_free, .allocator_data = a };
}
