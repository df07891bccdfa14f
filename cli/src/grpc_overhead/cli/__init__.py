"""The ``grpc-overhead`` command: the one composition root of the product.

Every sub-command is a module of this package exposing ``main(argv) -> int``
(``serve``, ``app``, ``demo``, ``report``, ``sql``, ``service``, ``load``,
``collector``); they are the only code that wires the libraries together
(analyzer, app, collector, prediction service, load generator), and no library
imports this package. ``processes`` is the one process toolkit the commands,
benchmarks and tests share. This module only dispatches, importing the
sub-command lazily so that ``grpc-overhead load`` does not pay for importing
chDB or Streamlit.
"""

from __future__ import annotations

import atexit
import errno
import importlib
import os
import sys
import threading
from typing import NoReturn

# sub-command -> (module with main(argv), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("grpc_overhead.cli.demo", "whole stack on the embedded default, app opened"),
    "serve": ("grpc_overhead.cli.serve", "intake + store (+ app) in one process"),
    "app": ("grpc_overhead.cli.app", "the Streamlit app against a store"),
    "service": ("grpc_overhead.cli.service", "the instrumented prediction server"),
    "load": ("grpc_overhead.cli.load", "load generator for the prediction service"),
    "report": ("grpc_overhead.cli.report", "phase breakdown (table, json, csv)"),
    "sql": ("grpc_overhead.cli.sql", "run SQL against the store"),
    "collector": ("grpc_overhead.cli.collector", "build, configure or run the collector"),
    "import": ("grpc_overhead.cli.import_traces", "pull traces from a Jaeger query API"),
    "experiment": ("grpc_overhead.cli.experiment", "run a matrix of configurations, one run each"),
    "compare": ("grpc_overhead.cli.compare", "phase-by-phase difference of runs, with noise"),
    "findings": ("grpc_overhead.cli.findings", "ranked, quantified advice (table, json)"),
}


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: grpc-overhead COMMAND [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "Run 'grpc-overhead COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] in ("-V", "--version"):
        from grpc_overhead.instrumentation.version import __version__

        print(__version__)
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"grpc-overhead: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, _ = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            print(f"grpc-overhead: '{name}' is not available in this build yet", file=sys.stderr)
            return 2
        raise
    try:
        code = int(module.main(rest) or 0)
        sys.stdout.flush()  # a write error shows here, not in the interpreter's exit
        return code
    except KeyboardInterrupt:
        return 130
    except OSError as error:
        if error.errno not in _OUTPUT_ERRORS:
            raise
        return _output_failed(name, error)


def run() -> NoReturn:
    """The program: ``grpc-overhead`` and ``python -m grpc_overhead`` (``main`` is what
    tests and embedding programs call; it returns).

    chDB 4.4 tears its engine down in the process's C++ exit, after Python has finished,
    and now and then crashes there (``Exception in global_context->shutdown(): The
    ShutdownTablesThreadPool is not initialized``, then SIGSEGV): a serve that had stopped
    cleanly, stored everything and printed its last line exited -11 under load. Its
    Python binding has no call that shuts the engine down first. So a command that loaded
    chDB ends the way the interpreter would (its other threads joined, the ``atexit``
    handlers run, the output flushed) and then leaves without the engine's teardown: its
    stores are closed by then, and what they wrote is on disk.
    """
    code = main()
    if "chdb" in sys.modules:
        _exit_past_the_engine(code)
    sys.exit(code)


def _exit_past_the_engine(code: int) -> NoReturn:
    # What the interpreter's exit does first, in its order: ``threading._shutdown`` tells
    # idle thread pools to finish (their workers wait on a queue; joining them without
    # that hangs) and joins the other threads; then the ``atexit`` handlers.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a reader gone away (``| head``): the exit code says what happened
    os._exit(code)


#: Failures of writing the output (``| head`` closing the pipe, a full disk), not of the command.
_OUTPUT_ERRORS = (errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
#: What a shell reports for a process that SIGPIPE ended (``yes | head`` has it too).
EXIT_BROKEN_PIPE = 128 + 13


def _output_failed(name: str, error: OSError) -> int:
    """The reader went away (``| head``) or the output cannot be written (disk full).

    Python turns SIGPIPE into ``BrokenPipeError`` and a full disk into ``OSError`` at the
    next write or flush, which would end in a traceback, and again at exit when the
    interpreter flushes stdout: point stdout at /dev/null so that flush stays quiet.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)
    if error.errno == errno.EPIPE:
        return EXIT_BROKEN_PIPE  # the reader has what it wanted: nothing to say
    print(f"grpc-overhead {name}: cannot write the output: {error.strerror}", file=sys.stderr)
    return 1
