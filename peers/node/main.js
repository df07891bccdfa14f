// node-peer: a real @grpc/grpc-js client or server traced by the OpenTelemetry Node SDK with
// its defaults, the way a Node team attaches it: NodeSDK with the gRPC instrumentation and
// nothing else configured. The exporter, its protocol and endpoint come from the SDK's
// defaults and the OTEL_* environment (OTLP over HTTP/protobuf to http://localhost:4318
// unless OTEL_EXPORTER_OTLP_ENDPOINT says otherwise); the service name from
// OTEL_SERVICE_NAME; the resource from the SDK's default detectors (host.name included).
//
// The service is grpc-overhead's Predictor (prediction.proto, loaded at run time by
// @grpc/proto-loader), so a Node client can call the Python service and a Python client
// the Node server. The server answers Predict with one score per entity; the client makes
// --calls unary Predict calls and prints a JSON summary on stdout.
//
//   node main.js --mode server --proto PATH [--listen 127.0.0.1:0] [--handler-delay-ms N]
//   node main.js --mode client --proto PATH --target HOST:PORT [--calls N] [--concurrency N]
//                [--entities N] [--features N] [--timeout-ms N]
//   --tracing none   no SDK at all (a bare baseline)
//
// Installed by scripts/build-node-peer.sh into tools/node-peer (`make node-peer`).
'use strict';

const { parseArgs } = require('node:util');

const { values: options } = parseArgs({
  options: {
    mode: { type: 'string' },
    tracing: { type: 'string', default: 'sdk' },
    proto: { type: 'string' },
    listen: { type: 'string', default: '127.0.0.1:0' },
    target: { type: 'string' },
    calls: { type: 'string', default: '10' },
    concurrency: { type: 'string', default: '1' },
    entities: { type: 'string', default: '20' },
    features: { type: 'string', default: '8' },
    'timeout-ms': { type: 'string', default: '10000' },
    'handler-delay-ms': { type: 'string', default: '0' },
  },
});

function fail(code, message) {
  process.stderr.write(`node-peer: ${message}\n`);
  process.exit(code);
}

if (!['server', 'client'].includes(options.mode)) {
  fail(2, `--mode must be server or client, not ${JSON.stringify(options.mode)}`);
}
if (!['sdk', 'none'].includes(options.tracing)) {
  fail(2, `--tracing must be sdk or none, not ${JSON.stringify(options.tracing)}`);
}
if (!options.proto) fail(2, '--proto (the path of prediction.proto) is required');

// The SDK starts before @grpc/grpc-js is loaded: the instrumentation patches the module as
// it is required. This is the SDK's documented zero-configuration setup.
let sdk = null;
if (options.tracing === 'sdk') {
  const { NodeSDK } = require('@opentelemetry/sdk-node');
  const { GrpcInstrumentation } = require('@opentelemetry/instrumentation-grpc');
  sdk = new NodeSDK({ instrumentations: [new GrpcInstrumentation()] });
  sdk.start();
}

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const definition = protoLoader.loadSync(options.proto, {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const Predictor = grpc.loadPackageDefinition(definition).grpc_overhead.prediction.v1.Predictor;

/** Flush every span the SDK holds (the batch processor exports every 5 s otherwise). */
async function shutdown() {
  if (sdk === null) return;
  try {
    await sdk.shutdown();
  } catch (error) {
    process.stderr.write(`node-peer: flushing spans: ${error}\n`);
    process.exitCode = 1;
  }
}

function runServer() {
  const delay = Number(options['handler-delay-ms']);
  const server = new grpc.Server();
  server.addService(Predictor.service, {
    Predict: (call, callback) => {
      const request = call.request;
      const entities = request.entities ? request.entities.entities.length : 1;
      const answer = () =>
        callback(null, {
          request_id: request.request_id,
          score_list: { scores: new Array(entities).fill(0.75) },
          model_version: 'node-peer',
        });
      if (delay > 0) setTimeout(answer, delay);
      else answer();
    },
  });
  server.bindAsync(options.listen, grpc.ServerCredentials.createInsecure(), (error, port) => {
    if (error) fail(1, `cannot listen on ${options.listen}: ${error.message}`);
    const host = options.listen.slice(0, options.listen.lastIndexOf(':'));
    // The ready line the Python fixtures wait for.
    process.stdout.write(`listening on ${host}:${port}\n`);
  });
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    server.tryShutdown(async () => {
      await shutdown();
      process.exit();
    });
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

async function runClient() {
  if (!options.target) fail(2, '--target is required in client mode');
  const calls = Number(options.calls);
  const concurrency = Math.max(1, Number(options.concurrency));
  const entities = Number(options.entities);
  const features = Number(options.features);
  const timeoutMs = Number(options['timeout-ms']);
  const request = {
    request_id: 'node-peer',
    query: { text: 'query', embedding: new Array(16).fill(0.25) },
    entities: {
      entities: Array.from({ length: entities }, (_, i) => ({
        id: `e${i}`,
        features: new Array(features).fill(0.5),
      })),
    },
  };
  const client = new Predictor(options.target, grpc.credentials.createInsecure());
  const codes = {};
  let next = 0;
  let errors = 0;
  let firstError = '';
  const started = process.hrtime.bigint();
  const one = () =>
    new Promise((resolve) => {
      const deadline = new Date(Date.now() + timeoutMs);
      client.Predict(request, { deadline }, (error) => {
        const code = error ? error.code : grpc.status.OK;
        codes[code] = (codes[code] || 0) + 1;
        if (error) {
          errors += 1;
          if (!firstError) firstError = error.message;
        }
        resolve();
      });
    });
  const worker = async () => {
    while (next < calls) {
      next += 1;
      await one();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  client.close();
  await shutdown();
  const summary = { calls, errors, codes, seconds };
  if (firstError) summary.first_error = firstError;
  process.stdout.write(`${JSON.stringify(summary)}\n`);
}

if (options.mode === 'server') {
  runServer();
} else {
  runClient().catch((error) => fail(1, error.stack || String(error)));
}
