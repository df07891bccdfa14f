"""Test support shared by ``tests/`` and ``bench/``, so neither imports the other.

Real components only, as everywhere in the suite: ``browser`` drives the
system's Chromium against a running app; ``ground_truth`` runs the real
pipeline with causes of known size injected (toxiproxy, libfaketime, a fixed
model cost) and checks that the analyzer's report finds them (reduced in
``make test``, full in ``make bench``). What the product itself needs to start
processes lives in the package (``grpc_overhead.processes``).
"""
