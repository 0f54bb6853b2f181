package dev.sundial.beam;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.beam.sdk.coders.ByteArrayCoder;
import org.apache.beam.sdk.coders.KvCoder;
import org.apache.beam.sdk.coders.VarIntCoder;
import org.apache.beam.sdk.testing.PAssert;
import org.apache.beam.sdk.testing.TestPipeline;
import org.apache.beam.sdk.transforms.DoFn;
import org.apache.beam.sdk.transforms.GroupByKey;
import org.apache.beam.sdk.transforms.Impulse;
import org.apache.beam.sdk.transforms.ParDo;
import org.apache.beam.sdk.values.KV;
import org.apache.beam.sdk.values.PCollection;
import org.junit.Rule;
import org.junit.Test;
import org.junit.experimental.categories.Category;
import org.junit.runner.RunWith;
import org.junit.runners.JUnit4;

/**
 * The Java side of tools/bench_memory.sh: one bundle of COUNT KV&lt;varint, bytes&gt; elements
 * (values of SIZE bytes, key = index % KEYS; system properties bench.count, bench.size,
 * bench.keys, default 256 values of 1 MiB over 256 keys) into a GroupByKey; every byte of every
 * value is checked after it, one summary line a key asserted. The runner's peak resident size is
 * measured by the command (its --prismLocation is a wrapper that records it). The data in flight
 * is printed to stdout as "in_flight_bytes N": for each element its varint key, the value's
 * varint length and its SIZE bytes.
 */
@RunWith(JUnit4.class)
public class MemoryBenchTest {
  @Rule public final transient TestPipeline p = TestPipeline.create();

  static int prop(String name, int dflt) {
    String v = System.getProperty(name);
    return v == null || v.isEmpty() ? dflt : Integer.parseInt(v);
  }

  static int varintLen(long v) {
    int n = 1;
    while (v >= 0x80) {
      v >>>= 7;
      n++;
    }
    return n;
  }

  /** Value i: its index (8 bytes, little endian), then a pattern of i. */
  static byte[] value(int i, int size) {
    byte[] v = new byte[size];
    for (int j = 0; j < 8; j++) {
      v[j] = (byte) ((long) i >>> (8 * j));
    }
    for (int j = 8; j < size; j++) {
      v[j] = (byte) (i * 131 + j * 7 + (j >> 13) * 3);
    }
    return v;
  }

  static class Make extends DoFn<byte[], KV<Integer, byte[]>> {
    final int count, size, keys;

    Make(int count, int size, int keys) {
      this.count = count;
      this.size = size;
      this.keys = keys;
    }

    @ProcessElement
    public void process(OutputReceiver<KV<Integer, byte[]>> out) {
      for (int i = 0; i < count; i++) {
        out.output(KV.of(i % keys, value(i, size)));
      }
    }
  }

  static class Check extends DoFn<KV<Integer, Iterable<byte[]>>, String> {
    final int size, keys;

    Check(int size, int keys) {
      this.size = size;
      this.keys = keys;
    }

    @ProcessElement
    public void process(@Element KV<Integer, Iterable<byte[]>> e, OutputReceiver<String> out) {
      int k = e.getKey(), n = 0;
      for (byte[] v : e.getValue()) {
        long i = 0;
        for (int j = 0; j < 8; j++) {
          i |= (long) (v[j] & 0xff) << (8 * j);
        }
        if (v.length != size || i % keys != k || !Arrays.equals(v, value((int) i, size))) {
          throw new IllegalStateException("key " + k + ": value " + i + " is wrong");
        }
        n++;
      }
      out.output("key " + k + ": " + n + " values, " + ((long) n * size) + " bytes");
    }
  }

  @Test
  @Category(MemoryBench.class)
  public void bundleIntoGroupByKey() {
    int count = prop("bench.count", 256), size = prop("bench.size", 1 << 20);
    int keys = prop("bench.keys", 256);
    long inFlight = 0;
    for (int i = 0; i < count; i++) {
      inFlight += varintLen(i % keys) + varintLen(size) + size;
    }
    System.out.println("in_flight_bytes " + inFlight);
    List<String> want = new ArrayList<>();
    for (int k = 0; k < Math.min(count, keys); k++) {
      long n = count / keys + (k < count % keys ? 1 : 0);
      want.add("key " + k + ": " + n + " values, " + (n * size) + " bytes");
    }
    PCollection<String> out =
        p.apply("Seed", Impulse.create())
            .apply("MakeValues", ParDo.of(new Make(count, size, keys)))
            .setCoder(KvCoder.of(VarIntCoder.of(), ByteArrayCoder.of()))
            .apply("Group", GroupByKey.create())
            .apply("CheckGroup", ParDo.of(new Check(size, keys)));
    PAssert.that(out).containsInAnyOrder(want);
    p.run().waitUntilFinish();
  }
}
