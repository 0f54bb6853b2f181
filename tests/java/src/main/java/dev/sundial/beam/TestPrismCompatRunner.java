package dev.sundial.beam;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.beam.fn.harness.ExternalWorkerService;
import org.apache.beam.model.jobmanagement.v1.ArtifactStagingServiceGrpc;
import org.apache.beam.model.jobmanagement.v1.JobApi;
import org.apache.beam.model.jobmanagement.v1.JobServiceGrpc;
import org.apache.beam.model.pipeline.v1.Endpoints.ApiServiceDescriptor;
import org.apache.beam.model.pipeline.v1.RunnerApi;
import org.apache.beam.runners.fnexecution.artifact.ArtifactRetrievalService;
import org.apache.beam.runners.fnexecution.artifact.ArtifactStagingService;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.fn.channel.ManagedChannelFactory;
import org.apache.beam.sdk.fn.server.GrpcFnServer;
import org.apache.beam.sdk.metrics.MetricResults;
import org.apache.beam.sdk.options.FileStagingOptions;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.util.construction.DefaultArtifactResolver;
import org.apache.beam.sdk.util.construction.Environments;
import org.apache.beam.sdk.util.construction.PipelineOptionsTranslation;
import org.apache.beam.sdk.util.construction.PipelineTranslation;
import org.apache.beam.sdk.util.construction.SdkComponents;
import org.apache.beam.sdk.util.construction.resources.PipelineResources;
import org.apache.beam.vendor.grpc.v1p69p0.com.google.protobuf.ByteString;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.ManagedChannel;
import org.joda.time.Duration;

/**
 * A stand-in for Beam's {@code TestPrismRunner} (artifact beam-runners-prism-java, which the Maven
 * registry reachable here does not serve at 2.73.0; nor does it serve beam-runners-portability-java
 * 2.73.0). Like TestPrismRunner it starts the binary named by --prismLocation as {@code BIN
 * -job_port=N -serve_http=B} on a free port, submits the pipeline to it through the Job API (the
 * whole classpath staged as artifacts, a LOOPBACK environment served by the SDK harness's
 * ExternalWorkerService in this JVM unless --defaultEnvironmentType says otherwise), waits for a
 * terminal state (at most --testTimeoutSeconds), fails the test unless the job is DONE, and stops
 * the binary. A failed job's first JOB_MESSAGE_ERROR is thrown as the test's exception. Metrics
 * are read as Beam's PortableMetrics reads them (see CompatMetrics).
 */
public class TestPrismCompatRunner extends PipelineRunner<PipelineResult> {
  private static final long POLL_MILLIS = 100;

  private final PrismCompatOptions options;

  private TestPrismCompatRunner(PrismCompatOptions options) {
    this.options = options;
  }

  public static TestPrismCompatRunner fromOptions(PipelineOptions options) {
    return new TestPrismCompatRunner(options.as(PrismCompatOptions.class));
  }

  @Override
  public PipelineResult run(Pipeline pipeline) {
    String bin = options.getPrismLocation();
    if (bin == null || bin.isEmpty() || !new File(bin).canExecute()) {
      throw new IllegalArgumentException("--prismLocation must name an executable: " + bin);
    }
    if (options.getDefaultEnvironmentType() == null
        || options.getDefaultEnvironmentType().isEmpty()) {
      options.setDefaultEnvironmentType(Environments.ENVIRONMENT_LOOPBACK);
    }
    List<AutoCloseable> cleanup = new ArrayList<>();
    Process process = null;
    try {
      int port = freePort();
      process = startRunner(bin, port);
      final Process p = process;
      cleanup.add(() -> stopProcess(p));
      awaitPort(port, process);
      String endpoint = "localhost:" + port;
      options.setJobEndpoint(endpoint);

      if (Environments.ENVIRONMENT_LOOPBACK.equals(options.getDefaultEnvironmentType())) {
        GrpcFnServer<ExternalWorkerService> workers = new ExternalWorkerService(options).start();
        cleanup.add(0, workers);
        options.setDefaultEnvironmentConfig(workers.getApiServiceDescriptor().getUrl());
      }
      FileStagingOptions staging = options.as(FileStagingOptions.class);
      if (staging.getFilesToStage() == null) {
        staging.setFilesToStage(
            PipelineResources.detectClassPathResourcesToStage(
                Environments.class.getClassLoader(), options));
      }

      RunnerApi.Pipeline proto =
          PipelineTranslation.toProto(pipeline, SdkComponents.create(options));
      proto = DefaultArtifactResolver.INSTANCE.resolveArtifacts(proto);

      ManagedChannelFactory channels = ManagedChannelFactory.createDefault();
      ManagedChannel channel =
          channels.forDescriptor(ApiServiceDescriptor.newBuilder().setUrl(endpoint).build());
      cleanup.add(0, () -> channel.shutdownNow());
      JobServiceGrpc.JobServiceBlockingStub jobs = JobServiceGrpc.newBlockingStub(channel);
      int rpcTimeout = options.getJobServerTimeout();
      JobApi.PrepareJobResponse prepared =
          jobs.withDeadlineAfter(rpcTimeout, TimeUnit.SECONDS)
              .withWaitForReady()
              .prepare(
                  JobApi.PrepareJobRequest.newBuilder()
                      .setJobName(options.getJobName())
                      .setPipeline(proto)
                      .setPipelineOptions(PipelineOptionsTranslation.toProto(options))
                      .build());
      if (prepared.hasArtifactStagingEndpoint()
          && !prepared.getArtifactStagingEndpoint().getUrl().isEmpty()) {
        ManagedChannel artifacts = channels.forDescriptor(prepared.getArtifactStagingEndpoint());
        try {
          ArtifactStagingService.offer(
              new ArtifactRetrievalService(),
              ArtifactStagingServiceGrpc.newStub(artifacts),
              prepared.getStagingSessionToken());
        } finally {
          artifacts.shutdownNow();
        }
      }
      JobApi.RunJobResponse run =
          jobs.withDeadlineAfter(rpcTimeout, TimeUnit.SECONDS)
              .run(
                  JobApi.RunJobRequest.newBuilder()
                      .setPreparationId(prepared.getPreparationId())
                      .build());
      Result result = new Result(jobs, run.getJobIdBytes(), rpcTimeout);

      Long timeout = options.getTestTimeoutSeconds();
      PipelineResult.State state = result.awaitTerminal(timeout);
      if (state == null) {
        result.cancelQuietly();
        throw new AssertionError(
            "Pipeline did not finish within --testTimeoutSeconds=" + timeout + " s (runner " + bin
                + ", job " + options.getJobName() + ")");
      }
      result.fetchMetrics();
      if (state != PipelineResult.State.DONE) {
        String error = result.firstError();
        if (error != null) {
          throw new RuntimeException(
              "The Runner experienced the following error during execution:\n" + error);
        }
        throw new AssertionError("Pipeline did not succeed: the job ended " + state);
      }
      return result;
    } catch (IOException e) {
      throw new RuntimeException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RuntimeException(e);
    } catch (Exception e) {
      if (e instanceof RuntimeException) {
        throw (RuntimeException) e;
      }
      throw new RuntimeException(e);
    } finally {
      for (AutoCloseable c : cleanup) {
        try {
          c.close();
        } catch (Exception ignored) {
          // best effort
        }
      }
    }
  }

  private Process startRunner(String bin, int port) throws IOException {
    ProcessBuilder pb =
        new ProcessBuilder(
            Arrays.asList(bin, "-job_port=" + port, "-serve_http=" + options.getEnableWebUI()));
    pb.redirectErrorStream(true);
    pb.redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
    String dir = options.getRunnerLogDir();
    if (dir != null && !dir.isEmpty()) {
      File d = new File(dir);
      d.mkdirs();
      String name = options.getJobName() == null ? "job" : options.getJobName();
      name = name.replaceAll("[^A-Za-z0-9._-]", "_");
      pb.redirectOutput(ProcessBuilder.Redirect.appendTo(new File(d, name + ".log")));
    } else {
      pb.redirectOutput(ProcessBuilder.Redirect.INHERIT);
    }
    return pb.start();
  }

  private void awaitPort(int port, Process process) throws IOException, InterruptedException {
    long deadline =
        System.nanoTime() + TimeUnit.SECONDS.toNanos(options.getRunnerStartTimeoutSeconds());
    while (true) {
      if (!process.isAlive()) {
        throw new IOException(
            "runner " + options.getPrismLocation() + " exited with " + process.exitValue()
                + " before listening on port " + port);
      }
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 200);
        return;
      } catch (IOException notYet) {
        if (System.nanoTime() > deadline) {
          throw new IOException(
              "runner " + options.getPrismLocation() + " did not listen on port " + port);
        }
        Thread.sleep(20);
      }
    }
  }

  private static void stopProcess(Process p) throws InterruptedException {
    if (!p.isAlive()) {
      return;
    }
    p.destroy();
    if (!p.waitFor(5, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      p.waitFor(5, TimeUnit.SECONDS);
    }
  }

  private static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  private static PipelineResult.State javaState(JobApi.JobState.Enum s) {
    switch (s) {
      case STOPPED:
        return PipelineResult.State.STOPPED;
      case RUNNING:
      case STARTING:
        return PipelineResult.State.RUNNING;
      case DONE:
        return PipelineResult.State.DONE;
      case FAILED:
        return PipelineResult.State.FAILED;
      case CANCELLED:
      case CANCELLING:
        return PipelineResult.State.CANCELLED;
      case UPDATED:
        return PipelineResult.State.UPDATED;
      default:
        return PipelineResult.State.UNKNOWN;
    }
  }

  /** The finished job: its state and metrics, kept after the runner process is gone. */
  private static final class Result implements PipelineResult {
    private final JobServiceGrpc.JobServiceBlockingStub jobs;
    private final ByteString jobId;
    private final int rpcTimeout;
    private State state = State.RUNNING;
    private MetricResults metrics = CompatMetrics.empty();

    Result(JobServiceGrpc.JobServiceBlockingStub jobs, ByteString jobId, int rpcTimeout) {
      this.jobs = jobs;
      this.jobId = jobId;
      this.rpcTimeout = rpcTimeout;
    }

    State awaitTerminal(Long timeoutSeconds) throws InterruptedException {
      long deadline =
          timeoutSeconds == null || timeoutSeconds <= 0
              ? Long.MAX_VALUE
              : System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
      JobApi.GetJobStateRequest req =
          JobApi.GetJobStateRequest.newBuilder().setJobIdBytes(jobId).build();
      while (true) {
        State s =
            javaState(jobs.withDeadlineAfter(rpcTimeout, TimeUnit.SECONDS).getState(req).getState());
        if (s.isTerminal()) {
          state = s;
          return s;
        }
        if (System.nanoTime() > deadline) {
          return null;
        }
        Thread.sleep(POLL_MILLIS);
      }
    }

    void cancelQuietly() {
      try {
        jobs.withDeadlineAfter(5, TimeUnit.SECONDS)
            .cancel(JobApi.CancelJobRequest.newBuilder().setJobIdBytes(jobId).build());
      } catch (RuntimeException ignored) {
        // the runner is stopped next anyway
      }
    }

    String firstError() {
      try {
        java.util.Iterator<JobApi.JobMessagesResponse> it =
            jobs.withDeadlineAfter(rpcTimeout, TimeUnit.SECONDS)
                .getMessageStream(
                    JobApi.JobMessagesRequest.newBuilder().setJobIdBytes(jobId).build());
        while (it.hasNext()) {
          JobApi.JobMessagesResponse r = it.next();
          if (r.hasMessageResponse()
              && r.getMessageResponse().getImportance()
                  == JobApi.JobMessage.MessageImportance.JOB_MESSAGE_ERROR) {
            return r.getMessageResponse().getMessageText();
          }
        }
      } catch (RuntimeException e) {
        return null;
      }
      return null;
    }

    void fetchMetrics() {
      JobApi.MetricResults m;
      try {
        m =
            jobs.withDeadlineAfter(rpcTimeout, TimeUnit.SECONDS)
                .getJobMetrics(JobApi.GetJobMetricsRequest.newBuilder().setJobIdBytes(jobId).build())
                .getMetrics();
      } catch (RuntimeException e) {
        return;
      }
      metrics = CompatMetrics.of(m);
    }

    @Override
    public State getState() {
      return state;
    }

    @Override
    public State cancel() {
      return state;
    }

    @Override
    public State waitUntilFinish(Duration duration) {
      return state;
    }

    @Override
    public State waitUntilFinish() {
      return state;
    }

    @Override
    public MetricResults metrics() {
      return metrics;
    }
  }
}
