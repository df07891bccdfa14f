// grpc-go-peer: a real grpc-go client or server traced by gRPC's own OpenTelemetry
// plugin (gRFC A72, google.golang.org/grpc/stats/opentelemetry) or by otelgrpc, exporting
// OTLP/gRPC, so grpc-overhead's tests run calls between grpc-go and the instrumented
// Python prediction service in any pairing.
//
// Messages are opaque bytes: a codec registered as "proto" passes them through, so the
// peer needs no generated code. The client sends the bytes of -request-file (the Python
// tests write a serialized PredictRequest there), the server answers with the bytes of
// -response-file. Known costs can be injected as ground truth: -marshal-delay spins in
// the codec's Marshal (request serialization on a client, response serialization on a
// server) and -handler-delay in the server's handler.
//
// Built by scripts/build-grpc-go-peer.sh into tools/bin/grpc-go-peer.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip"
	experimentalotel "google.golang.org/grpc/experimental/opentelemetry"
	"google.golang.org/grpc/metadata"
	grpcotel "google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawCodec passes bytes through; registered as "proto" so that it answers for
// application/grpc+proto and interoperates with protobuf peers.
type rawCodec struct{ delay time.Duration }

func spin(d time.Duration) {
	if d <= 0 {
		return
	}
	// Busy-wait, not sleep: serialization is CPU work, and a sleep's wake-up latency
	// would add scheduler noise to the ground truth.
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
	}
}

func (c rawCodec) Marshal(v any) ([]byte, error) {
	frame, ok := v.(*[]byte)
	if !ok {
		// Real protobuf messages (the OTLP exporter's own calls) stay protobuf.
		message, isProto := v.(proto.Message)
		if !isProto {
			return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
		}
		return proto.Marshal(message)
	}
	spin(c.delay)
	return *frame, nil
}

func (c rawCodec) Unmarshal(data []byte, v any) error {
	frame, ok := v.(*[]byte)
	if !ok {
		message, isProto := v.(proto.Message)
		if !isProto {
			return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
		}
		return proto.Unmarshal(data, message)
	}
	*frame = append((*frame)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

type config struct {
	mode, tracing, listen, target, method, requestFile, responseFile, compression string
	calls, concurrency                                                            int
	marshalDelay, handlerDelay, timeout                                           time.Duration
	failFirstAttempt, retry                                                       bool
}

func main() {
	var c config
	flag.StringVar(&c.mode, "mode", "", "server or client")
	flag.StringVar(&c.tracing, "tracing", "a72", "a72 (grpc-go's stats/opentelemetry), otelgrpc or none")
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "server: address to listen on")
	flag.StringVar(&c.target, "target", "", "client: host:port to call")
	flag.StringVar(&c.method, "method", "/grpc_overhead.prediction.v1.Predictor/Predict", "full method name")
	flag.StringVar(&c.requestFile, "request-file", "", "client: bytes of each request message")
	flag.StringVar(&c.responseFile, "response-file", "", "server: bytes of each response message")
	flag.StringVar(&c.compression, "compression", "", "client: gzip or empty")
	flag.IntVar(&c.calls, "calls", 10, "client: number of calls")
	flag.IntVar(&c.concurrency, "concurrency", 1, "client: calls in flight")
	flag.DurationVar(&c.marshalDelay, "marshal-delay", 0, "CPU time spent in every Marshal (ground truth)")
	flag.DurationVar(&c.handlerDelay, "handler-delay", 0, "server: time the handler takes (ground truth)")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Second, "client: deadline of each call")
	flag.BoolVar(&c.failFirstAttempt, "fail-first-attempt", false, "server: answer UNAVAILABLE to first attempts")
	flag.BoolVar(&c.retry, "retry", false, "client: retry UNAVAILABLE (service config retry policy)")
	flag.Parse()
	encoding.RegisterCodec(rawCodec{delay: c.marshalDelay})

	provider, err := tracerProvider(c.tracing)
	if err != nil {
		fail(2, err)
	}
	code := 0
	switch c.mode {
	case "server":
		err = serve(c, provider)
	case "client":
		err = runClient(c, provider)
	default:
		err = fmt.Errorf("-mode must be server or client, not %q", c.mode)
		code = 2
	}
	if provider != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if shutdownErr := provider.Shutdown(ctx); shutdownErr != nil && err == nil {
			err = fmt.Errorf("flushing spans: %w", shutdownErr)
		}
		cancel()
	}
	if err != nil {
		fail(max(code, 1), err)
	}
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "grpc-go-peer:", err)
	os.Exit(code)
}

// tracerProvider exports OTLP/gRPC to OTEL_EXPORTER_OTLP_ENDPOINT; the resource comes from
// OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES plus host.name (the analyzer's clock domain).
func tracerProvider(tracing string) (*sdktrace.TracerProvider, error) {
	if tracing == "none" {
		return nil, nil
	}
	if tracing != "a72" && tracing != "otelgrpc" {
		return nil, fmt.Errorf("-tracing must be a72, otelgrpc or none, not %q", tracing)
	}
	ctx := context.Background()
	exporter, err := otlptracegrpc.New(ctx, otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(200*time.Millisecond)),
		sdktrace.WithResource(res),
	), nil
}

func propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

func otelgrpcOptions(provider *sdktrace.TracerProvider) []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(provider),
		otelgrpc.WithPropagators(propagator()),
		otelgrpc.WithMessageEvents(otelgrpc.ReceivedEvents, otelgrpc.SentEvents),
	}
}

func serve(c config, provider *sdktrace.TracerProvider) error {
	response, err := os.ReadFile(c.responseFile)
	if c.responseFile == "" || err != nil {
		return fmt.Errorf("-response-file is required and must be readable: %v", err)
	}
	var options []grpc.ServerOption
	switch {
	case provider == nil:
	case c.tracing == "a72":
		options = append(options, grpcotel.ServerOption(grpcotel.Options{
			TraceOptions: traceOptions(provider),
		}))
	default:
		options = append(options, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpcOptions(provider)...)))
	}
	handler := func(stream grpc.ServerStream) error {
		var request []byte
		if err := stream.RecvMsg(&request); err != nil {
			return err
		}
		if c.failFirstAttempt {
			md, _ := metadata.FromIncomingContext(stream.Context())
			if len(md.Get("grpc-previous-rpc-attempts")) == 0 {
				return status.Error(codes.Unavailable, "first attempt refused (-fail-first-attempt)")
			}
		}
		if c.handlerDelay > 0 {
			time.Sleep(c.handlerDelay)
		}
		reply := response
		return stream.SendMsg(&reply)
	}
	// The method the tests name is registered (A72 names server spans after registered
	// methods only: "Recv.other" otherwise); any other method is answered the same way.
	service, method, ok := strings.Cut(strings.TrimPrefix(c.method, "/"), "/")
	if !ok {
		return fmt.Errorf("-method must be /package.Service/Method, not %q", c.method)
	}
	options = append(options, grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		return handler(stream)
	}))
	listener, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	server := grpc.NewServer(options...)
	server.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    method,
			Handler:       func(_ any, stream grpc.ServerStream) error { return handler(stream) },
			ServerStreams: true,
			ClientStreams: true,
		}},
	}, struct{}{})
	// The ready line the Python fixtures wait for.
	fmt.Printf("listening on %s\n", listener.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.GracefulStop()
	}()
	return server.Serve(listener)
}

func traceOptions(provider *sdktrace.TracerProvider) (options experimentalotel.TraceOptions) {
	options.TracerProvider = provider
	options.TextMapPropagator = propagator()
	return options
}

const retryServiceConfig = `{"methodConfig": [{"name": [{}], "retryPolicy": {
  "maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

type summary struct {
	Calls    int     `json:"calls"`
	Errors   int     `json:"errors"`
	Seconds  float64 `json:"seconds"`
	FirstErr string  `json:"first_error,omitempty"`
}

func runClient(c config, provider *sdktrace.TracerProvider) error {
	request, err := os.ReadFile(c.requestFile)
	if c.requestFile == "" || err != nil {
		return fmt.Errorf("-request-file is required and must be readable: %v", err)
	}
	if c.target == "" {
		return fmt.Errorf("-target is required")
	}
	options := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	switch {
	case provider == nil:
	case c.tracing == "a72":
		options = append(options, grpcotel.DialOption(grpcotel.Options{TraceOptions: traceOptions(provider)}))
	default:
		options = append(options, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpcOptions(provider)...)))
	}
	if c.retry {
		options = append(options, grpc.WithDefaultServiceConfig(retryServiceConfig))
	}
	conn, err := grpc.NewClient(c.target, options...)
	if err != nil {
		return err
	}
	defer conn.Close()
	var callOptions []grpc.CallOption
	if c.compression != "" {
		callOptions = append(callOptions, grpc.UseCompressor(c.compression))
	}
	method := c.method
	if !strings.HasPrefix(method, "/") {
		method = "/" + method
	}
	var next, errors atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	started := time.Now()
	for range max(c.concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(c.calls) {
				ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
				payload, reply := request, []byte(nil)
				err := conn.Invoke(ctx, method, &payload, &reply, callOptions...)
				cancel()
				if err != nil {
					errors.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	out := summary{Calls: c.calls, Errors: int(errors.Load()), Seconds: time.Since(started).Seconds()}
	if first, ok := firstErr.Load().(string); ok {
		out.FirstErr = first
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
