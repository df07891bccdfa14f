from grpc_overhead.cli import run

run()
