package dev.sundial.beam;

import org.apache.beam.sdk.options.Default;
import org.apache.beam.sdk.options.Description;
import org.apache.beam.sdk.options.PortablePipelineOptions;
import org.apache.beam.sdk.testing.TestPipelineOptions;

/**
 * Options of {@link TestPrismCompatRunner}: the flags of Beam's TestPrismRunner that the
 * ValidatesRunner suite uses, plus where the runner process's output goes.
 */
public interface PrismCompatOptions extends PortablePipelineOptions, TestPipelineOptions {
  @Description("Path of the runner binary (Sundial or Prism), started as BIN -job_port=N -serve_http=B.")
  String getPrismLocation();

  void setPrismLocation(String value);

  @Description("Passed to the runner as -serve_http.")
  @Default.Boolean(false)
  boolean getEnableWebUI();

  void setEnableWebUI(boolean value);

  @Description(
      "Directory for the runner process's output, one file per pipeline named after the job;"
          + " empty: the output is inherited.")
  @Default.String("")
  String getRunnerLogDir();

  void setRunnerLogDir(String value);

  @Description("Seconds to wait for the runner's job port to accept connections.")
  @Default.Integer(30)
  int getRunnerStartTimeoutSeconds();

  void setRunnerStartTimeoutSeconds(int value);
}
