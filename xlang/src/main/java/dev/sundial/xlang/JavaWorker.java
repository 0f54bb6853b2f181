/*
 * Sundial: a Beam Java SDK worker started as a process (beam:env:process:v1).
 *
 * A runner starts a PROCESS environment's command with --id=WORKER_ID and
 * --provision_endpoint=HOST:PORT (Sundial adds the control, logging and artifact endpoints,
 * which the provision information repeats). Beam's container entry point does the same job
 * inside Docker; this one runs on the local machine with the classpath it was started with:
 *
 *   1. GetProvisionInfo from the provision endpoint, with the worker id in the "worker_id"
 *      request header (the runner knows its workers by it);
 *   2. the pipeline options, runner capabilities and the logging and control endpoints from
 *      that answer (the endpoint flags where the answer has none);
 *   3. Beam's FnHarness on them, in this process, until the runner closes the control stream.
 *
 * The environment's staged artifacts are not fetched: the worker's classpath is the one the
 * expansion service that built the transforms runs with (tools/expansion_service.sh starts both
 * from the same resolved classpath). Any failure before the harness runs is printed to stderr
 * and ends the process with status 1, so the runner can report it.
 */
package dev.sundial.xlang;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.beam.fn.harness.FnHarness;
import org.apache.beam.model.fnexecution.v1.ProvisionApi;
import org.apache.beam.model.fnexecution.v1.ProvisionServiceGrpc;
import org.apache.beam.model.pipeline.v1.Endpoints.ApiServiceDescriptor;
import org.apache.beam.sdk.fn.channel.AddHarnessIdInterceptor;
import org.apache.beam.sdk.fn.channel.ManagedChannelFactory;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.util.construction.PipelineOptionsTranslation;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.ManagedChannel;

public final class JavaWorker {
  private JavaWorker() {}

  private static String flag(String[] args, String name) {
    String prefix = "--" + name + "=";
    String value = null;
    for (String a : args) {
      if (a.startsWith(prefix)) {
        value = a.substring(prefix.length());
      }
    }
    return value;
  }

  private static ApiServiceDescriptor endpoint(ApiServiceDescriptor fromInfo, String fromFlag) {
    if (fromInfo != null && !fromInfo.getUrl().isEmpty()) {
      return fromInfo;
    }
    if (fromFlag == null || fromFlag.isEmpty()) {
      return null;
    }
    return ApiServiceDescriptor.newBuilder().setUrl(fromFlag).build();
  }

  private static void fail(String what) {
    System.err.println("java worker: " + what);
    System.exit(1);
  }

  public static void main(String[] args) throws Exception {
    String id = flag(args, "id");
    // Prism passes the id in shell quotes (--id='ID') to a command it starts without a shell;
    // the runner knows its worker by the id without them.
    if (id != null && id.length() >= 2 && id.startsWith("'") && id.endsWith("'")) {
      id = id.substring(1, id.length() - 1);
    }
    String provision = flag(args, "provision_endpoint");
    if (id == null || id.isEmpty() || provision == null || provision.isEmpty()) {
      fail("needs --id=WORKER_ID and --provision_endpoint=HOST:PORT (got " + List.of(args) + ")");
    }
    ManagedChannel channel =
        ManagedChannelFactory.createDefault()
            .withInterceptors(List.of(AddHarnessIdInterceptor.create(id)))
            .forDescriptor(ApiServiceDescriptor.newBuilder().setUrl(provision).build());
    ProvisionApi.ProvisionInfo info = null;
    try {
      info =
          ProvisionServiceGrpc.newBlockingStub(channel)
              .withDeadlineAfter(60, TimeUnit.SECONDS)
              .getProvisionInfo(ProvisionApi.GetProvisionInfoRequest.getDefaultInstance())
              .getInfo();
    } catch (RuntimeException e) {
      fail("GetProvisionInfo at " + provision + " for worker " + id + " failed: " + e);
    } finally {
      channel.shutdownNow();
    }
    ApiServiceDescriptor control =
        endpoint(
            info.hasControlEndpoint() ? info.getControlEndpoint() : null,
            flag(args, "control_endpoint"));
    ApiServiceDescriptor logging =
        endpoint(
            info.hasLoggingEndpoint() ? info.getLoggingEndpoint() : null,
            flag(args, "logging_endpoint"));
    if (control == null || logging == null) {
      fail("the provision information for worker " + id + " names no control or logging endpoint");
    }
    PipelineOptions options = PipelineOptionsTranslation.fromProto(info.getPipelineOptions());
    Set<String> capabilities = new HashSet<>(info.getRunnerCapabilitiesList());
    FnHarness.main(id, options, capabilities, logging, control, null);
  }
}
