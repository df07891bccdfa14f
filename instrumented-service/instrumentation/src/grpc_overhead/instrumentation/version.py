"""The instrumentation's version: the instrumentation scope version on every span.

Both distributions carry the same number; ``grpc-overhead --version`` prints it.
"""

__version__ = "0.1.0"
