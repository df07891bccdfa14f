"""An experiment FILE (YAML): settings, a matrix, and the cells it expands to.

    name: compression
    calls: 300            # load settings at the top apply to every cell
    concurrency: 8
    entities: 200
    matrix:               # every combination of these is one cell
      compression: [none, gzip, zstd]
      tls: [false, true]
    exclude:              # combinations to leave out (GitHub Actions' matrix rule)
      - {compression: gzip, tls: true}

A setting may sit at the top or in the matrix, never both. Every value is
checked before anything starts, and a bad one is named with where it is
(``matrix.concurrency[2]: expected an integer >= 1, got 'x'``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_CELLS = 500
GRPC_COMPRESSIONS = ("none", "gzip", "deflate", "zstd", "lz4", "snappy")
MODES = ("unary", "stream", "batch", "chunks", "upload")
TRANSPORTS = ("grpc", "rest")
PAYLOADS = ("structured", "image")
REST_BODIES = ("json", "binary", "base64")
ENCODINGS = ("repeated", "packed")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class SpecError(ValueError):
    """The experiment file cannot be run as written."""


def _integer(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SpecError(f"expected an integer >= {minimum}, got {value!r}")
        return value

    return check


def _number(minimum: float, strict: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or value < minimum or (strict and value == minimum) or value != value:
            bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
            raise SpecError(f"expected a number {bound}, got {value!r}")
        return float(value)

    return check


def _choice(*choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise SpecError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return check


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"expected true or false, got {value!r}")
    return value


#: Every setting a file may use: its check, and its default when neither the top
#: level nor the matrix sets it (None: left to the service / load generator).
SETTINGS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    # how long each cell's load runs
    "calls": (_integer(1), None),
    "duration": (_number(0, strict=True), None),
    "warmup_calls": (_integer(0), 0),
    # load shape
    "concurrency": (_integer(1), 8),
    "channels": (_integer(1), 1),
    "rps": (_number(0, strict=True), None),
    "timeout": (_number(0, strict=True), 10.0),
    "seed": (_integer(0), 0),
    # what a call carries
    "transport": (_choice(*TRANSPORTS), "grpc"),
    "mode": (_choice(*MODES), "unary"),
    "payload": (_choice(*PAYLOADS), "structured"),
    "image_bytes": (_integer(1), 230_000),
    "rest_body": (_choice(*REST_BODIES), "json"),
    "entities": (_integer(0), 200),
    "features": (_integer(1), 32),
    "encoding": (_choice(*ENCODINGS), None),
    "compression": (_choice(*GRPC_COMPRESSIONS), "none"),
    "stream_messages": (_integer(1), 10),
    "batch_size": (_integer(1), 8),
    "tls": (_boolean, False),
    # the server
    "instances": (_integer(1), 1),
    "workers": (_integer(1), 8),
    "model_cost_ms": (_number(0), 0.0),
    "aio": (_boolean, False),
    "max_connection_age_s": (_number(0, strict=True), None),
    "max_concurrent_rpcs": (_integer(1), None),
    # instances behind one address: a TCP balancer picks an instance per new connection
    "one_address": (_boolean, False),
    # the path between them (toxiproxy)
    "bandwidth_kb_s": (_integer(1), None),
    "latency_ms": (_integer(1), None),
    # no effect on the run: cells told apart by number only (copy: [1, 2] is an A/A check)
    "copy": (_integer(0), 0),
}
TOP_LEVEL = ("name", "description", "matrix", "exclude", "rounds", "baseline", "expect")
#: Rounds when the file does not say: five fresh starts of every cell, interleaved (three
#: leave a t interval with 2 degrees of freedom: wide).
DEFAULT_ROUNDS = 5
MAX_ROUNDS = 50


@dataclass(frozen=True)
class Cell:
    index: int
    config: dict[str, Any]  # every setting, defaults filled in
    varied: dict[str, Any]  # the matrix's settings only: what tells cells apart

    def label(self) -> str:
        return ", ".join(f"{key}={_show(value)}" for key, value in self.varied.items()) or "all"


def _show(value: Any) -> str:
    if value is None:
        return "off"
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Expectation:
    """What a finding predicted: the cells against their baseline must save ``saving_us``
    on ``phase`` at the p50 (``total``: the whole call)."""

    saving_us: float
    phase: str = "total"


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    cells: list[Cell]
    source: str
    rounds: int = DEFAULT_ROUNDS
    baseline: dict[str, Any] = field(default_factory=dict)
    expect: Expectation | None = None

    def baseline_of(self, cell: Cell) -> Cell | None:
        """The cell ``cell`` is compared with: the same settings but the ``baseline:`` ones
        (every matrix setting at its first value without ``baseline:``, i.e. cell 0);
        None for a baseline itself, or when the matrix has no such cell (excluded)."""
        wanted = dict(cell.varied)
        if self.baseline:
            wanted.update(self.baseline)
        else:
            wanted = dict(self.cells[0].varied)
        if wanted == cell.varied:
            return None
        return next((other for other in self.cells if other.varied == wanted), None)


def load(path: str | Path) -> Experiment:
    """Read and check FILE; SpecError with a one-line reason if it cannot be run."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SpecError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:  # a binary file, or another encoding
        raise SpecError(
            f"{path}: not UTF-8 text (byte {error.start}): an experiment is a YAML file"
        ) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SpecError(f"{path}: not valid YAML{where}: {problem}") from None
    return parse(document, default_name=path.stem, source=str(path))


def parse(document: Any, default_name: str = "experiment", source: str = "") -> Experiment:
    if not isinstance(document, dict):
        raise SpecError("the file must be a mapping of settings (and a matrix:)")
    unknown = [key for key in document if key not in SETTINGS and key not in TOP_LEVEL]
    if unknown:
        raise SpecError(
            f"unknown setting {unknown[0]!r}; known: {', '.join(sorted(SETTINGS))} "
            f"(and {', '.join(TOP_LEVEL)})"
        )
    name = document.get("name", default_name)
    if not isinstance(name, str) or not NAME.match(name):
        raise SpecError(f"name: expected letters, digits, '_', '.', '-' (<= 64), got {name!r}")
    description = document.get("description") or ""
    if not isinstance(description, str):
        raise SpecError("description: expected text")
    base = {key: _check(key, value, key) for key, value in document.items() if key in SETTINGS}
    matrix = _matrix(document.get("matrix") or {}, base)
    excludes = _excludes(document.get("exclude") or [], matrix)
    keys = list(matrix)
    combinations = list(itertools.product(*(matrix[key] for key in keys))) if keys else [()]
    cells = []
    for combination in combinations:
        varied = dict(zip(keys, combination, strict=True))
        if any(all(varied.get(k) == v for k, v in rule.items()) for rule in excludes):
            continue
        config = {key: default for key, (_, default) in SETTINGS.items()}
        config.update(base)
        config.update(varied)
        cell = Cell(len(cells), config, varied)
        _check_cell(cell)
        cells.append(cell)
    if not cells:
        raise SpecError("exclude: leaves no cell to run")
    if len(cells) > MAX_CELLS:
        raise SpecError(f"matrix: {len(cells)} cells; at most {MAX_CELLS} per experiment")
    rounds = document.get("rounds", DEFAULT_ROUNDS)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise SpecError(f"rounds: expected an integer 1..{MAX_ROUNDS}, got {rounds!r}")
    baseline = _baseline(document.get("baseline"), matrix)
    expect = _expectation(document.get("expect"))
    return Experiment(name, description, cells, source, rounds, baseline, expect)


def _baseline(rule: Any, matrix: dict[str, list[Any]]) -> dict[str, Any]:
    if rule is None:
        return {}
    if not isinstance(rule, dict) or not rule:
        raise SpecError("baseline: expected a mapping of matrix settings, e.g. {compression: gzip}")
    checked = {}
    for key, value in rule.items():
        if key not in matrix:
            raise SpecError(f"baseline: {key!r} is not a matrix setting")
        value = _check(key, value, f"baseline.{key}")
        if value not in matrix[key]:
            raise SpecError(f"baseline.{key}: {value!r} is not among the matrix's values")
        checked[key] = value
    return checked


def _expectation(rule: Any) -> Expectation | None:
    from grpc_overhead.analyzer.runs import CELL_PHASES

    if rule is None:
        return None
    if not isinstance(rule, dict) or "saving_us" not in rule:
        raise SpecError("expect: expected {saving_us: MICROSECONDS} (and phase: PHASE)")
    unknown = [key for key in rule if key not in ("saving_us", "phase")]
    if unknown:
        raise SpecError(f"expect: unknown key {unknown[0]!r}; known: saving_us, phase")
    saving = _check_number(rule["saving_us"], "expect.saving_us")
    phase = rule.get("phase", "total")
    if phase not in CELL_PHASES:
        raise SpecError(f"expect.phase: {phase!r} is not a phase; known: {', '.join(CELL_PHASES)}")
    return Expectation(saving, phase)


def _check_number(value: Any, where: str) -> float:
    try:
        return _number(0, strict=True)(value)
    except SpecError as error:
        raise SpecError(f"{where}: {error}") from None


def _check(key: str, value: Any, where: str) -> Any:
    checker, default = SETTINGS[key]
    if value is None and default is None:  # "off": e.g. bandwidth_kb_s: [null, 5000]
        return None
    try:
        return checker(value)
    except SpecError as error:
        raise SpecError(f"{where}: {error}") from None


def _matrix(matrix: Any, base: dict[str, Any]) -> dict[str, list[Any]]:
    if not isinstance(matrix, dict):
        raise SpecError("matrix: expected a mapping of setting -> list of values")
    checked: dict[str, list[Any]] = {}
    for key, values in matrix.items():
        if key not in SETTINGS:
            raise SpecError(
                f"matrix: unknown setting {key!r}; known: {', '.join(sorted(SETTINGS))}"
            )
        if key in base:
            raise SpecError(f"{key} is set both at the top and in the matrix: keep one")
        if not isinstance(values, list) or not values:
            raise SpecError(f"matrix.{key}: expected a non-empty list of values")
        checked[key] = [_check(key, value, f"matrix.{key}[{i}]") for i, value in enumerate(values)]
        if len(set(map(repr, checked[key]))) != len(checked[key]):
            raise SpecError(f"matrix.{key}: a value is listed twice")
    return checked


def _excludes(rules: Any, matrix: dict[str, list[Any]]) -> list[dict[str, Any]]:
    if not isinstance(rules, list) or not all(isinstance(rule, dict) for rule in rules):
        raise SpecError("exclude: expected a list of mappings, e.g. [{transport: rest, tls: true}]")
    for index, rule in enumerate(rules):
        for key in rule:
            if key not in matrix:
                raise SpecError(f"exclude[{index}]: {key!r} is not a matrix setting")
    return rules


def _check_cell(cell: Cell) -> None:
    """Combinations no run can honour, named with the cell's settings."""
    config = cell.config
    problems = []
    if config["transport"] == "rest":
        if config["mode"] != "unary":
            problems.append(f"REST cells run mode unary only, not {config['mode']}")
        if config["compression"] != "none":
            problems.append("REST cells send uncompressed bodies (compression: none)")
        if config["tls"]:
            problems.append("REST cells run plaintext only (tls: false)")
        if config["aio"]:
            problems.append("the REST server is asyncio already (aio: false)")
    if config["payload"] == "image":
        if config["mode"] not in ("unary", "batch"):
            problems.append("image payloads are sent by mode unary or batch")
        if config["compression"] in ("zstd", "lz4", "snappy"):
            problems.append("zstd/lz4/snappy compress packed features, not images")
    elif config["rest_body"] != "json" and config["transport"] == "rest":
        problems.append("rest_body binary/base64 carries images (payload: image)")
    if config["one_address"] and config["transport"] == "rest":
        problems.append("one_address balances gRPC connections (transport: grpc)")
    if config["encoding"] == "repeated" and config["compression"] in ("zstd", "lz4", "snappy"):
        problems.append(f"compression {config['compression']} needs encoding packed")
    if problems:
        raise SpecError(
            f"cell {cell.index} ({cell.label()}): {'; '.join(problems)}; leave the combination "
            "out with exclude:"
        )
