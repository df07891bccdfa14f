"""The prediction service: the instrumented gRPC workload whose calls get split into phases.

``server`` (sync and ``grpc.aio``), ``model`` (a deterministic MLP with a
CPU-time cost knob), ``payload``/``codec`` (feature encodings and
application-level compression), ``tls`` and the generated ``protos``. The
command is ``grpc_overhead.cli.service``; see README.md next to ``src/``.
"""
