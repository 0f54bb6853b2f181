"""schema_rows_check.py SUNDIAL - Beam's Python schema'd rows through GroupBy, with fields the
runner cannot read.

Python gives a row field typed Any (a beam.Row built in a lambda, a NamedTuple field declared
Any) the logical type beam:logical:pythonsdk_any:v1 without a representation: only the SDK's
pickling coder can read its values. Sundial refused such a row coder at Prepare ("logical type
... has no representation"), so Beam's ptransform_test TestGroupBy::test_fields and
test_pickled_field failed; the runner only ever needs such a row length-prefixed, as opaque
bytes. Each case asserts exactly what comes out:

  1. beam.GroupBy('square') over rows built in a lambda (every field Any): groups and values.
  2. beam.GroupBy with a computed key and a field, the key a row of Any fields.
  3. A NamedTuple with an Any field holding objects of a class of this file, grouped by an int
     field, and the Any values come back equal.

Exit 0 on success, 1 on failure, 77 when Beam's Python SDK is not installed.
"""
import sys
import typing

sys.dont_write_bytecode = True  # nothing written into the source tree
from sundial_py import Checks, run_pipeline, serve  # noqa: E402


class Payload:
    """An object only pickling can carry (no coder of its own)."""

    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, Payload) and other.n == self.n

    def __hash__(self):
        return hash(self.n)

    def __repr__(self):
        return "Payload(%d)" % self.n


class Tagged(typing.NamedTuple):
    group: int
    payload: typing.Any


def main():
    sundial = sys.argv[1]
    try:
        import apache_beam as beam
        from apache_beam.testing.util import assert_that, equal_to
    except ImportError as e:
        print("NOT RUN: apache_beam is not installed (%s)" % e)
        return 77
    beam.coders.registry.register_coder(Tagged, beam.coders.RowCoder)

    def rows(p):
        return (p | beam.Create(range(-2, 3)) | beam.Map(int)
                | beam.Map(lambda x: beam.Row(value=x, square=x * x,
                                              sign=x // abs(x) if x else 0)))

    def by_square(p):
        got = (rows(p) | beam.GroupBy("square")
               | beam.MapTuple(lambda k, vs: (k, sorted(v.value for v in vs))))
        assert_that(got, equal_to([(0, [0]), (1, [-1, 1]), (4, [-2, 2])]))

    def by_computed_key(p):
        got = (rows(p) | beam.GroupBy("sign", big=lambda r: r.value > 1)
               | beam.MapTuple(lambda k, vs: ((k.sign, k.big), sorted(v.value for v in vs))))
        assert_that(got, equal_to([((-1, False), [-2, -1]), ((0, False), [0]),
                                   ((1, False), [1]), ((1, True), [2])]))

    def named_tuple_any(p):
        got = (p | beam.Create([Tagged(i % 2, Payload(i)) for i in range(6)])
               .with_output_types(Tagged)
               | beam.GroupBy("group")
               | beam.MapTuple(lambda k, vs: (k, sorted(v.payload.n for v in vs),
                                              all(isinstance(v.payload, Payload) for v in vs))))
        assert_that(got, equal_to([(0, [0, 2, 4], True), (1, [1, 3, 5], True)]))

    checks = Checks()
    with serve(sundial) as endpoint:
        for name, build in (("group-by-field", by_square), ("group-by-computed", by_computed_key),
                            ("named-tuple-any", named_tuple_any)):
            state, error = run_pipeline(endpoint, name, build)
            checks.check(state == "DONE", "%s: rows with Any fields grouped (%s %s)"
                         % (name, state, error[:400]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
