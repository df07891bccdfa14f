// grpc-java-peer: a real grpc-java client or server traced by grpc-opentelemetry (gRFC A72),
// exporting OTLP/gRPC (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES), so grpc-overhead's tests run calls between grpc-java, grpc-go
// and the instrumented Python prediction service. Tracing is experimental in grpc-java:
// GRPC_EXPERIMENTAL_ENABLE_OTEL_TRACING=true turns it on (the harness sets it).
//
// --tracing none leaves the peer untraced by itself (no SDK, no grpc-opentelemetry): what
// the OpenTelemetry Java agent, attached with -javaagent, then instruments on its own.
//
// Messages are opaque bytes, as in the grpc-go peer: the client sends the bytes of
// --request-file, the server answers with those of --response-file; --marshal-delay-us
// spins the CPU while a message is serialized (ground truth).
package grpcoverhead;

import io.grpc.CallOptions;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.InsecureServerCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerBuilder;
import io.grpc.ServerServiceDefinition;
import io.grpc.opentelemetry.GrpcOpenTelemetry;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.ServerCalls;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.autoconfigure.AutoConfiguredOpenTelemetrySdk;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

public final class GrpcJavaPeer {
  private GrpcJavaPeer() {}

  /** Bytes in, bytes out; serializing spins the CPU for the configured time. */
  static final class RawMarshaller implements MethodDescriptor.Marshaller<byte[]> {
    private final long spinNanos;

    RawMarshaller(long spinNanos) {
      this.spinNanos = spinNanos;
    }

    @Override
    public InputStream stream(byte[] value) {
      long deadline = System.nanoTime() + spinNanos;
      while (System.nanoTime() < deadline) {
        Thread.onSpinWait();
      }
      return new ByteArrayInputStream(value);
    }

    @Override
    public byte[] parse(InputStream stream) {
      try {
        return stream.readAllBytes();
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      if (!argv[i].startsWith("--")) {
        fail(2, "expected --name value pairs, got " + argv[i]);
      }
      args.put(argv[i].substring(2), argv[i + 1]);
    }
    String mode = args.getOrDefault("mode", "");
    String method = args.getOrDefault("method", "grpc_overhead.prediction.v1.Predictor/Predict");
    if (method.startsWith("/")) {
      method = method.substring(1);
    }
    RawMarshaller marshaller =
        new RawMarshaller(
            TimeUnit.MICROSECONDS.toNanos(Long.parseLong(args.getOrDefault("marshal-delay-us", "0"))));
    MethodDescriptor<byte[], byte[]> descriptor =
        MethodDescriptor.<byte[], byte[]>newBuilder()
            .setType(MethodDescriptor.MethodType.UNARY)
            .setFullMethodName(method)
            .setRequestMarshaller(marshaller)
            .setResponseMarshaller(marshaller)
            .build();
    String tracing = args.getOrDefault("tracing", "a72");
    if (!tracing.equals("a72") && !tracing.equals("none")) {
      fail(2, "--tracing must be a72 or none, not '" + tracing + "'");
    }
    int code;
    if (tracing.equals("none")) {
      switch (mode) {
        case "server" -> code = serve(args, descriptor, null, null);
        case "client" -> code = client(args, descriptor, null);
        default -> {
          fail(2, "--mode must be server or client, not '" + mode + "'");
          return;
        }
      }
      System.exit(code);
    }
    OpenTelemetrySdk sdk =
        AutoConfiguredOpenTelemetrySdk.builder()
            .addPropertiesSupplier(
                () ->
                    Map.of(
                        "otel.metrics.exporter", "none",
                        "otel.logs.exporter", "none",
                        "otel.bsp.schedule.delay", "200",
                        "otel.exporter.otlp.protocol", "grpc"))
            .build()
            .getOpenTelemetrySdk();
    GrpcOpenTelemetry grpcOtel = GrpcOpenTelemetry.newBuilder().sdk(sdk).build();
    switch (mode) {
      case "server" -> code = serve(args, descriptor, grpcOtel, sdk);
      case "client" -> code = client(args, descriptor, grpcOtel);
      default -> {
        fail(2, "--mode must be server or client, not '" + mode + "'");
        return;
      }
    }
    sdk.getSdkTracerProvider().forceFlush().join(30, TimeUnit.SECONDS);
    sdk.shutdown().join(30, TimeUnit.SECONDS);
    System.exit(code);
  }

  private static void fail(int code, String message) {
    System.err.println("grpc-java-peer: " + message);
    System.exit(code);
  }

  private static byte[] read(Map<String, String> args, String name) throws IOException {
    String file = args.get(name);
    if (file == null) {
      fail(2, "--" + name + " is required");
    }
    return Files.readAllBytes(Path.of(file));
  }

  private static int serve(
      Map<String, String> args,
      MethodDescriptor<byte[], byte[]> descriptor,
      GrpcOpenTelemetry grpcOtel,
      OpenTelemetrySdk sdk)
      throws Exception {
    byte[] response = read(args, "response-file");
    ServerServiceDefinition service =
        ServerServiceDefinition.builder(descriptor.getServiceName())
            .addMethod(
                descriptor,
                ServerCalls.asyncUnaryCall(
                    (request, observer) -> {
                      observer.onNext(response);
                      observer.onCompleted();
                    }))
            .build();
    ServerBuilder<?> builder =
        Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(service);
    if (grpcOtel != null) {
      grpcOtel.configureServerBuilder(builder);
    }
    Server server = builder.build().start();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  server.shutdown();
                  try {
                    server.awaitTermination(5, TimeUnit.SECONDS);
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                  if (sdk != null) {
                    sdk.shutdown().join(30, TimeUnit.SECONDS);
                  }
                }));
    // The ready line the Python fixtures wait for.
    System.out.println("listening on 127.0.0.1:" + server.getPort());
    System.out.flush();
    server.awaitTermination();
    return 0;
  }

  private static int client(
      Map<String, String> args, MethodDescriptor<byte[], byte[]> descriptor, GrpcOpenTelemetry grpcOtel)
      throws Exception {
    byte[] request = read(args, "request-file");
    String target = args.get("target");
    if (target == null) {
      fail(2, "--target is required");
    }
    int calls = Integer.parseInt(args.getOrDefault("calls", "10"));
    ManagedChannelBuilder<?> builder =
        Grpc.newChannelBuilder(target, InsecureChannelCredentials.create());
    if (grpcOtel != null) {
      grpcOtel.configureChannelBuilder(builder);
    }
    ManagedChannel channel = builder.build();
    int errors = 0;
    String firstError = "";
    long started = System.nanoTime();
    for (int i = 0; i < calls; i++) {
      try {
        ClientCalls.blockingUnaryCall(
            channel, descriptor, CallOptions.DEFAULT.withDeadlineAfter(10, TimeUnit.SECONDS), request);
      } catch (RuntimeException e) {
        errors++;
        if (firstError.isEmpty()) {
          firstError = String.valueOf(e.getMessage()).replace("\"", "'");
        }
      }
    }
    double seconds = (System.nanoTime() - started) / 1e9;
    channel.shutdown().awaitTermination(5, TimeUnit.SECONDS);
    System.out.printf(
        "{\"calls\": %d, \"errors\": %d, \"seconds\": %.6f, \"first_error\": \"%s\"}%n",
        calls, errors, seconds, firstError);
    return 0;
  }
}
