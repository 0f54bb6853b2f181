"""bench_memory_py.py ENDPOINT [COUNT [SIZE [KEYS]]] - Beam Python's side of
tools/bench_memory.sh: one bundle of COUNT KV<varint, bytes> elements (values of SIZE bytes,
key = index % KEYS) into a GroupByKey on a running `sundial serve` (LOOPBACK: the SDK worker
runs in this process, so the server's resident size is the runner's alone).

    Impulse -> FlatMap (one input element emits them all: one bundle) -> GroupByKey
    -> Map (every byte of every value checked; one summary line a key) -> assert_that

It prints `in_flight_bytes N`, the bytes of the bundle's encoded elements (for each: the varint
key, the value's varint length and its SIZE bytes; the windowed-value header that frames each
element on the Data stream is not counted), then `done` once the run ended DONE with the
expected contents. Defaults: 256 values of 1 MiB over 256 keys. Exit 1 on failure.
"""
import sys
import typing

sys.dont_write_bytecode = True


def varint_len(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def value(i, size):
    """Value i: its index (8 bytes, little endian), then a pattern of i."""
    head = i.to_bytes(8, "little")
    unit = bytes(((i * 131 + j * 7) & 0xFF) for j in range(251))
    body = (unit * (size // len(unit) + 1))[:size - 8]
    return head + body


def main():
    endpoint = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 20
    keys = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    in_flight = sum(varint_len(i % keys) + varint_len(size) + size for i in range(count))
    print("in_flight_bytes %d" % in_flight, flush=True)

    def make(_):
        for i in range(count):
            yield i % keys, value(i, size)

    def check(kv):
        k, vs = kv
        n = 0
        for v in vs:
            i = int.from_bytes(v[:8], "little")
            if len(v) != size or i % keys != k or v != value(i, size):
                raise ValueError("key %d: value %d is wrong" % (k, i))
            n += 1
        return "key %d: %d values, %d bytes" % (k, n, n * size)

    want = []
    for k in range(min(count, keys)):
        n = count // keys + (1 if k < count % keys else 0)
        want.append("key %d: %d values, %d bytes" % (k, n, n * size))
    opts = PipelineOptions(["--runner=PortableRunner", "--job_endpoint=" + endpoint,
                            "--environment_type=LOOPBACK", "--job_name=bench-memory-py"])
    p = beam.Pipeline(options=opts)
    out = (p
           | "Seed" >> beam.Impulse()
           | "MakeValues" >> beam.FlatMap(make).with_output_types(typing.Tuple[int, bytes])
           | "Group" >> beam.GroupByKey()
           | "CheckGroup" >> beam.Map(check))
    assert_that(out, equal_to(want))
    result = p.run()
    state = result.wait_until_finish()
    if str(state) != "DONE":
        print("bench_memory_py: the run ended %s" % state, file=sys.stderr)
        return 1
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
