package dev.sundial.beam;

import java.util.Collections;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.PipelineOptionsRegistrar;
import org.apache.beam.sdk.runners.PipelineRunnerRegistrar;

/** Makes --runner=TestPrismCompatRunner and its options known to PipelineOptionsFactory. */
public final class PrismCompatRegistrar {
  private PrismCompatRegistrar() {}

  /** The runner. */
  public static final class Runner implements PipelineRunnerRegistrar {
    @Override
    public Iterable<Class<? extends PipelineRunner<?>>> getPipelineRunners() {
      return Collections.singletonList(TestPrismCompatRunner.class);
    }
  }

  /** Its options. */
  public static final class Options implements PipelineOptionsRegistrar {
    @Override
    public Iterable<Class<? extends PipelineOptions>> getPipelineOptions() {
      return Collections.singletonList(PrismCompatOptions.class);
    }
  }
}
