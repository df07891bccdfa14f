"""The house rules a reader relies on, checked statically (docs/architecture.md names them).

- Folder path = import path: every component keeps ``COMPONENT/src/grpc_overhead/NAME``,
  ``grpc_overhead`` is a namespace package (no ``__init__.py``) over both distributions.
- Zero import cycles among first-party modules, counting imports inside functions
  and under ``TYPE_CHECKING``: a lazy import hides a cycle, it does not remove it.
- Layers import downwards only (``LAYERS``); the analyzer never imports the app,
  the commands or Streamlit; the instrumentation imports only grpcio, protobuf and
  OpenTelemetry, so its distribution stays light.
- No module over ``MAX_LINES`` lines (generated protobuf code aside).
- bench and tests do not import each other; what both need lives in ``harness``
  or in the package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450
#: Component folder -> the one package its src/ holds.
COMPONENTS = {
    "cli": "cli",
    "analyzer": "analyzer",
    "app": "app",
    "collector": "collector",
    "processes": "processes",
    "instrumented-service/instrumentation": "instrumentation",
    "instrumented-service/prediction": "prediction",
    "instrumented-service/load_generator": "load_generator",
}
#: What each layer may import besides itself. cli is the one composition root.
LAYERS: dict[str, set[str]] = {
    "instrumentation": set(),
    "processes": set(),  # the process toolkit: commands, harness, bench and tests share it
    "collector": {"instrumentation", "processes"},  # the former's environment variables only
    "analyzer": set(),
    "app": {"analyzer"},
    "prediction": {"instrumentation"},
    "load_generator": {"instrumentation", "prediction"},
    "cli": {
        "instrumentation",
        "processes",
        "collector",
        "analyzer",
        "app",
        "prediction",
        "load_generator",
    },
    "__main__": {"cli"},
}
#: Third-party top-level imports the light distribution may use.
INSTRUMENTATION_THIRD_PARTY = {"grpc", "google", "opentelemetry"}
#: Top-level first-party roots outside the package (run from the repository root).
OTHER_ROOTS = ("bench", "harness", "tests")


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in out if (ROOT / name).is_file()]


@cache
def modules() -> dict[str, Path]:
    """Dotted name -> file, for every first-party module."""
    found: dict[str, Path] = {}
    for component in COMPONENTS:
        src = ROOT / component / "src"
        for path in src.rglob("*.py"):
            found[_dotted(path.relative_to(src))] = path
    for root in OTHER_ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            found[_dotted(path.relative_to(ROOT))] = path
    return found


def _dotted(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module or name's module, line) for every import anywhere in the file."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:  # a submodule, or a name whose module is ``base``
                yield f"{base}.{alias.name}", node.lineno


def _first_party(target: str) -> str | None:
    """The first-party module an import resolves to (a name's module), or None."""
    known = modules()
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


@cache
def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in modules().items():
        targets = {_first_party(target) for target, _ in _imports(name, path)}
        edges[name] = {target for target in targets if target and target != name}
    return edges


def _layer(module: str) -> str:
    return module.split(".")[1] if module.startswith("grpc_overhead.") else module


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_no_import_cycles_counting_lazy_and_type_checking_imports() -> None:
    assert len(modules()) > 100  # the walk found the tree
    assert _cycles(graph()) == []


def test_no_module_over_the_size_limit() -> None:
    too_long = {}
    for path in _tracked():
        if "_pb2" in path.name:  # generated by grpcio-tools
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            too_long[str(path.relative_to(ROOT))] = lines
    assert too_long == {}


def test_layers_import_downwards_only() -> None:
    upward = []
    for module, targets in graph().items():
        if not module.startswith("grpc_overhead"):
            continue
        layer = _layer(module)
        for target in targets:
            other = _layer(target)
            if other != layer and other not in LAYERS[layer]:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_nothing_but_the_commands_imports_the_commands() -> None:
    importers = {
        module
        for module, targets in graph().items()
        if any(_layer(target) == "cli" for target in targets)
        and module.startswith("grpc_overhead")
        and _layer(module) not in ("cli", "__main__")
    }
    assert importers == set()


def _third_party(module: str) -> set[str]:
    path = modules()[module]
    roots = {target.split(".")[0] for target, _ in _imports(module, path)}
    return roots - set(sys.stdlib_module_names) - {"grpc_overhead", "__future__", *OTHER_ROOTS}


def test_analyzer_never_imports_streamlit_or_plotly() -> None:
    found = {
        module: sorted(_third_party(module) & {"streamlit", "plotly"})
        for module in modules()
        if module.startswith("grpc_overhead.analyzer")
    }
    assert {module: names for module, names in found.items() if names} == {}


def test_instrumentation_imports_only_grpc_protobuf_and_opentelemetry() -> None:
    found = {
        module: sorted(_third_party(module) - INSTRUMENTATION_THIRD_PARTY)
        for module in modules()
        if module.startswith("grpc_overhead.instrumentation")
    }
    assert {module: names for module, names in found.items() if names} == {}


def test_bench_and_tests_do_not_import_each_other() -> None:
    crossing = [
        f"{module} -> {target}"
        for module, targets in graph().items()
        for target in targets
        if {module.split(".")[0], target.split(".")[0]} == {"bench", "tests"}
        or (module.startswith("harness") and target.split(".")[0] in ("bench", "tests"))
    ]
    assert crossing == []


def test_folder_path_is_import_path() -> None:
    for component, package in COMPONENTS.items():
        src = ROOT / component / "src"
        built = ("__pycache__", ".egg-info")  # git-ignored build output
        found = sorted(p.name for p in src.iterdir() if not p.name.endswith(built))
        assert found == ["grpc_overhead"], component
        namespace = src / "grpc_overhead"
        assert not (namespace / "__init__.py").exists(), f"{component}: namespace package"
        assert (namespace / package / "__init__.py").is_file(), component
    # The root distribution maps every package onto the folder of the same dotted name.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for dotted, folder in config["package-dir"].items():
        assert folder.endswith("src/" + dotted.replace(".", "/")), (dotted, folder)
    # Static tools cannot follow the editable import hook: they get the src roots.
    pyright = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pyright"]
    assert sorted(pyright["extraPaths"]) == sorted(f"{component}/src" for component in COMPONENTS)
    for dotted in config["packages"]:
        top = ".".join(dotted.split(".")[:2])
        base = config["package-dir"][top]
        assert (ROOT / base / "/".join(dotted.split(".")[2:])).is_dir(), dotted


def test_the_instrumentation_distribution_stays_light() -> None:
    light = tomllib.loads(
        (ROOT / "instrumented-service/instrumentation/pyproject.toml").read_text()
    )
    names = [
        requirement.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].strip()
        for requirement in light["project"]["dependencies"]
    ]
    heavy = [
        name
        for name in names
        if not (name in ("grpcio", "protobuf") or name.startswith("opentelemetry-"))
    ]
    assert heavy == []
    entry = light["project"]["entry-points"]["opentelemetry_instrumentor"]["grpc_overhead"]
    assert entry == "grpc_overhead.instrumentation.instrumentor:GrpcOverheadInstrumentor"
    full = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"{light['project']['name']}=={light['project']['version']}" in full["dependencies"]
    assert (ROOT / "instrumented-service/instrumentation" / light["project"]["readme"]).is_file()
    # One version for both, the one spans carry as their instrumentation scope's.
    from grpc_overhead.instrumentation.version import __version__

    assert light["project"]["version"] == full["version"] == __version__
