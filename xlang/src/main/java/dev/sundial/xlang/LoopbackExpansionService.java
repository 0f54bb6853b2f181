/*
 * Sundial: Beam's Java expansion service on the loopback interface only.
 *
 * Beam's own entry point (ExpansionService.main) binds every interface. This one serves the same
 * ExpansionService (and its artifact retrieval service, through Beam's ExpansionServer) on
 * 127.0.0.1, and checks before it listens that the environment it will hand out is one a local
 * runner can start without Docker.
 *
 *   java -cp CLASSPATH dev.sundial.xlang.LoopbackExpansionService PORT [PIPELINE OPTIONS...]
 *
 * PORT 0 picks a free port. Once listening it prints one line
 *   "expansion service listening on 127.0.0.1:PORT (environment ...)"
 * to stdout, which tools/expansion_service.sh and the tests read.
 */
package dev.sundial.xlang;

import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import org.apache.beam.sdk.expansion.service.ExpansionServer;
import org.apache.beam.sdk.expansion.service.ExpansionService;
import org.apache.beam.sdk.expansion.service.ExpansionServiceOptions;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.PipelineOptionsFactory;
import org.apache.beam.sdk.options.PortablePipelineOptions;

public final class LoopbackExpansionService {
  private LoopbackExpansionService() {}

  private static void usage(String why) {
    System.err.println("expansion service: " + why);
    System.err.println(
        "usage: LoopbackExpansionService PORT --defaultEnvironmentType=PROCESS|EXTERNAL"
            + " --defaultEnvironmentConfig=CONFIG [other pipeline options]");
    System.exit(2);
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      usage("no PORT");
    }
    int port = -1;
    try {
      port = Integer.parseInt(args[0]);
    } catch (NumberFormatException e) {
      usage("PORT must be a number 0..65535, not '" + args[0] + "'");
    }
    if (port < 0 || port > 65535) {
      usage("PORT must be 0..65535, not " + port);
    }
    PipelineOptionsFactory.register(ExpansionServiceOptions.class);
    PipelineOptions options =
        PipelineOptionsFactory.fromArgs(Arrays.copyOfRange(args, 1, args.length)).create();

    // Docker is what Beam falls back to when no environment is named; a runner without Docker
    // can start PROCESS and EXTERNAL workers only, so say so now rather than at job time.
    PortablePipelineOptions portable = options.as(PortablePipelineOptions.class);
    String type = portable.getDefaultEnvironmentType();
    String config = portable.getDefaultEnvironmentConfig();
    if (type == null || !(type.equals("PROCESS") || type.equals("EXTERNAL"))) {
      usage(
          "--defaultEnvironmentType must be PROCESS or EXTERNAL (got "
              + (type == null ? "none, which means DOCKER" : type)
              + "): Java workers are started as local processes, not in Docker");
    }
    if (config == null || config.isEmpty()) {
      usage("--defaultEnvironmentConfig is required for a " + type + " environment");
    }
    // The allow list is read lazily by Beam; a missing or malformed file fails here instead of
    // at the first JavaExternalTransform.
    options.as(ExpansionServiceOptions.class).getJavaClassLookupAllowlist();

    ExpansionService service = new ExpansionService(options);
    ExpansionServer server = ExpansionServer.create(service, "127.0.0.1", port);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    server.close();
                  } catch (Exception e) {
                    System.err.println("expansion service: stopping: " + e);
                  }
                  stopped.countDown();
                }));
    System.out.println(
        "expansion service listening on "
            + server.getHost()
            + ":"
            + server.getPort()
            + " (environment "
            + type
            + " "
            + config
            + ")");
    System.out.flush();
    stopped.await();
  }
}
