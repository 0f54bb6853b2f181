"""large_state_check.py SUNDIAL - side inputs and user state larger than one State API page,
with Beam's Python SDK.

The runner answers a state get of more than 1 MiB in pages (continuation tokens). Beam's
Python SDK decodes each page on its own, so a page that ended inside a value failed the bundle
("Unknown type tag"): Beam's own sideinputs_test.py test_side_input_with_sdf did. Each case here
reads several MiB through the State API and asserts exactly what arrived:

  1. An iterable side input of 30,000 (key, value) byte tuples (about 4 MiB, a coder of the
     SDK's own, pickled) read whole by one element: count and digest.
  2. A multimap side input (AsMultiMap) whose one key holds 20,000 values (about 2.5 MiB).
  3. A bag state of 30,000 values (about 3.8 MiB) read back by a timer at the end of the window
     (a bundle of its own, so through the State API): every value comes back.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import hashlib
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
from sundial_py import Checks, run_pipeline, serve  # noqa: E402


def digest(pairs):
    m = hashlib.md5()
    for k, v in sorted(pairs):
        m.update(k)
        m.update(v)
    return m.hexdigest()


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        from apache_beam import coders
        from apache_beam.testing.util import assert_that, equal_to
        from apache_beam.transforms import userstate
    except ImportError as e:
        print("NOT RUN: apache_beam is not installed (%s)" % e)
        return 77

    pairs = [(b"key-%06d" % i, b"v" * 120 + b"%d" % i) for i in range(30000)]
    want_iter = [(len(pairs), digest(pairs))]

    class Track(beam.DoFn):
        def process(self, element, side):
            got = list(side)
            yield len(got), digest(got)

    class FromKeys(beam.DoFn):
        def process(self, element, side):
            vs = list(side["big"])
            yield "big", len(vs), sum(len(v) for v in vs), len(list(side["small"]))

    class Buffer(beam.DoFn):
        """Keeps every value in a bag; a timer at the end of the window reads the bag back."""
        BAG = userstate.BagStateSpec("bag", coders.BytesCoder())
        END = userstate.TimerSpec("end", userstate.TimeDomain.WATERMARK)

        def process(self, kv, w=beam.DoFn.WindowParam, bag=beam.DoFn.StateParam(BAG),
                    end=beam.DoFn.TimerParam(END)):
            bag.add(kv[1])
            end.set(w.max_timestamp())

        @userstate.on_timer(END)
        def at_end(self, bag=beam.DoFn.StateParam(BAG)):
            held = sorted(bag.read())
            yield len(held), held == [b"%07d" % i + b"x" * 120 for i in range(30000)]

    checks = Checks()
    with serve(sundial) as endpoint:
        def iterable(p):
            main = p | "main" >> beam.Create([0])
            side = (p | "side" >> beam.Create(range(len(pairs)))
                    | beam.Map(lambda i: pairs[i]).with_output_types(tuple))
            assert_that(main | beam.ParDo(Track(), beam.pvalue.AsIter(side)),
                        equal_to(want_iter))

        state, error = run_pipeline(endpoint, "iterable-side-input", iterable)
        checks.check(state == "DONE", "a 4 MiB iterable side input arrives whole: %s (%s %s)"
                     % (want_iter, state, error[-600:]))

        def multimap(p):
            main = p | "main" >> beam.Create([0])
            side = (p | "side" >> beam.Create(range(20001))
                    | beam.Map(lambda i: ("small", b"s") if i == 20000
                               else ("big", b"%05d" % i + b"y" * 120)))
            assert_that(main | beam.ParDo(FromKeys(), beam.pvalue.AsMultiMap(side)),
                        equal_to([("big", 20000, 20000 * 125, 1)]))

        state, error = run_pipeline(endpoint, "multimap-side-input", multimap)
        checks.check(state == "DONE", "a key with 2.5 MiB of values in a multimap side input "
                     "(%s %s)" % (state, error[-600:]))

        def bag(p):
            out = (p | beam.Create(range(30000))
                   | beam.Map(lambda i: ("k", b"%07d" % i + b"x" * 120))
                   | beam.ParDo(Buffer()))
            assert_that(out, equal_to([(30000, True)]))

        state, error = run_pipeline(endpoint, "bag-state", bag)
        checks.check(state == "DONE", "a 3.8 MiB bag state reads back whole at its timer "
                     "(%s %s)" % (state, error[-600:]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
