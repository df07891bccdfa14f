"""The load generator: drives the prediction service at a rate, a concurrency and a payload.

``workload`` (what each call sends), ``runner`` (open- and closed-loop
drivers over instrumented channels) and ``stats`` (the summary it prints).
The command is ``grpc_overhead.cli.load``; see README.md next to ``src/``.
"""
