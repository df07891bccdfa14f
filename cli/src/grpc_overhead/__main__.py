import sys

from grpc_overhead.cli import main

sys.exit(main())
