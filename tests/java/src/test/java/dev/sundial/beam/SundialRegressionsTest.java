package dev.sundial.beam;

import java.lang.reflect.Field;
import org.apache.beam.sdk.coders.KvCoder;
import org.apache.beam.sdk.coders.StringUtf8Coder;
import org.apache.beam.sdk.coders.VarIntCoder;
import org.apache.beam.sdk.state.StateSpec;
import org.apache.beam.sdk.state.StateSpecs;
import org.apache.beam.sdk.state.TimeDomain;
import org.apache.beam.sdk.state.Timer;
import org.apache.beam.sdk.state.TimerSpec;
import org.apache.beam.sdk.state.TimerSpecs;
import org.apache.beam.sdk.state.ValueState;
import org.apache.beam.sdk.testing.PAssert;
import org.apache.beam.sdk.testing.TestPipeline;
import org.apache.beam.sdk.transforms.Create;
import org.apache.beam.sdk.transforms.DoFn;
import org.apache.beam.sdk.transforms.Flatten;
import org.apache.beam.sdk.transforms.GroupByKey;
import org.apache.beam.sdk.transforms.ParDo;
import org.apache.beam.sdk.transforms.Sum;
import org.apache.beam.sdk.transforms.Values;
import org.apache.beam.sdk.transforms.WithKeys;
import org.apache.beam.sdk.transforms.windowing.Sessions;
import org.apache.beam.sdk.transforms.windowing.Window;
import org.apache.beam.sdk.values.KV;
import org.apache.beam.sdk.values.PCollection;
import org.apache.beam.sdk.values.TimestampedValue;
import org.apache.beam.sdk.values.WindowedValues;
import org.joda.time.Duration;
import org.joda.time.Instant;
import org.junit.After;
import org.junit.Rule;
import org.junit.Test;
import org.junit.experimental.categories.Category;
import org.junit.runner.RunWith;
import org.junit.runners.JUnit4;

/**
 * Pipelines that once failed on Sundial outside Beam's ValidatesRunner suite (found with the
 * core tests jar's NeedsRunner category), kept as regression tests in the CI subset.
 */
@RunWith(JUnit4.class)
public class SundialRegressionsTest {
  @Rule public final transient TestPipeline p = TestPipeline.create();

  /**
   * With Java's element-metadata support on (Beam's MetadataPropagationTest turns it on for the
   * whole JVM), every windowed value the SDK writes flags metadata in its pane byte and carries
   * an ElementMetadata message before the value. Sundial failed every such bundle ("pane info:
   * unknown encoding form 8"); it now reads past the metadata, through a GroupByKey and a
   * stateful DoFn with an event-time timer.
   */
  @Test
  @Category(SundialRegression.class)
  public void testElementMetadataIsReadPast() throws Exception {
    WindowedValues.WindowedValueCoder.setMetadataSupported();
    PCollection<KV<String, Integer>> input =
        p.apply(
            Create.of(KV.of("a", 1), KV.of("a", 2), KV.of("b", 5))
                .withCoder(KvCoder.of(StringUtf8Coder.of(), VarIntCoder.of())));
    PCollection<KV<String, Integer>> sums =
        input
            .apply("Group", GroupByKey.create())
            .apply("Sum", ParDo.of(new SumValues()));
    PCollection<KV<String, Integer>> fired = sums.apply("Timer", ParDo.of(new EmitOnTimer()));
    PAssert.that(sums).containsInAnyOrder(KV.of("a", 3), KV.of("b", 5));
    PAssert.that(fired).containsInAnyOrder(KV.of("a", 3), KV.of("b", 5));
    p.run().waitUntilFinish();
  }

  /** Each key's values summed. */
  private static class SumValues extends DoFn<KV<String, Iterable<Integer>>, KV<String, Integer>> {
    @ProcessElement
    public void process(
        @Element KV<String, Iterable<Integer>> e, OutputReceiver<KV<String, Integer>> out) {
      int sum = 0;
      for (int v : e.getValue()) {
        sum += v;
      }
      out.output(KV.of(e.getKey(), sum));
    }
  }

  /** Keeps each key's value and emits it from an event-time timer at the element's timestamp. */
  private static class EmitOnTimer extends DoFn<KV<String, Integer>, KV<String, Integer>> {
    @StateId("value")
    private final StateSpec<ValueState<Integer>> valueSpec = StateSpecs.value(VarIntCoder.of());

    @TimerId("end")
    private final TimerSpec endSpec = TimerSpecs.timer(TimeDomain.EVENT_TIME);

    @ProcessElement
    public void process(
        @Element KV<String, Integer> e,
        @Timestamp Instant ts,
        @StateId("value") ValueState<Integer> value,
        @TimerId("end") Timer end) {
      value.write(e.getValue());
      end.set(ts);
    }

    @OnTimer("end")
    public void onEnd(
        @Key String key,
        @StateId("value") ValueState<Integer> value,
        OutputReceiver<KV<String, Integer>> out) {
      out.output(KV.of(key, value.read()));
    }
  }

  /**
   * Sessions that a GroupByKey already merged (Java marks its output's windowing strategy
   * ALREADY_MERGED) are grouped again by the windows they carry. Sundial merged them again in
   * the second GroupByKey, joining foo's [1, 8) and bar's [3, 7) once both had one key: 8, 9
   * instead of 5, 9, 3 (Beam's GroupByKeyTest$WindowTests#testWindowFnPostMerging).
   */
  @Test
  @Category(SundialRegression.class)
  public void testAlreadyMergedSessionsAreNotMergedAgain() {
    PCollection<Integer> sums =
        p.apply(
                Create.timestamped(
                    TimestampedValue.of(KV.of("foo", 1), new Instant(1)),
                    TimestampedValue.of(KV.of("foo", 4), new Instant(4)),
                    TimestampedValue.of(KV.of("bar", 3), new Instant(3)),
                    TimestampedValue.of(KV.of("foo", 9), new Instant(9))))
            .apply(Window.into(Sessions.withGapDuration(Duration.millis(4L))))
            .apply("First grouping", GroupByKey.create())
            .apply("Drop keys", Values.create())
            .apply("Explode", Flatten.iterables())
            .apply("One key", WithKeys.of("k"))
            .apply("Second grouping", Sum.integersPerKey())
            .apply("Sums", Values.create());
    PAssert.that(sums).containsInAnyOrder(5, 9, 3);
    p.run().waitUntilFinish();
  }

  /** Turns Java's element-metadata support off again: it is a static switch of the JVM. */
  @After
  public void metadataOff() throws Exception {
    Field f = WindowedValues.WindowedValueCoder.class.getDeclaredField("metadataSupported");
    f.setAccessible(true);
    f.setBoolean(null, false);
  }
}
