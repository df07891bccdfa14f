"""Benchmarks behind the design's performance targets; ``python -m bench.run`` runs them all.

A benchmark is a module ``bench/<name>.py`` exposing ``main(argv) -> int`` that
writes ``bench/results/<name>.json`` (and a markdown table next to it) and prints
where the results went. Importing a benchmark module must not start anything.
"""
