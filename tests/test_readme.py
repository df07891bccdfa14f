"""The README's and the guides' promises that a test can hold: commands, variables, the two
set-up targets, the pages, the paths a user creates."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grpc_overhead.cli import COMMANDS
from grpc_overhead.instrumentation.environment import DOCUMENTED

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
#: The README and the guides whose blocks a user pastes (docs/team.md's team block).
PASTED = README + (DOCS / "team.md").read_text()


def test_the_readme_is_a_front_door_that_fits_on_a_few_screens():
    assert len(README.splitlines()) <= 250


def test_every_documented_variable_is_in_the_variables_table():
    table = (DOCS / "variables.md").read_text()
    missing = [v.name for v in DOCUMENTED if f"| `{v.name}` |" not in table]
    assert not missing
    listed = set(re.findall(r"^\| `(GRPC_OVERHEAD_[A-Z_]+)` \|", table, re.M))
    assert listed == {v.name for v in DOCUMENTED}


def test_every_variable_the_code_reads_is_documented():
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    used = set()
    for name in tracked:
        path = ROOT / name
        if path.suffix in {".py", ".yaml", ".sh"} and "tests" not in path.parts and path.exists():
            used |= set(re.findall(r"GRPC_OVERHEAD_[A-Z_]+[A-Z]", path.read_text()))
    assert used - {v.name for v in DOCUMENTED} == set()


def test_two_setup_commands_and_every_cli_command_are_shown():
    assert "make demo" in README and "make test" in README
    for command in COMMANDS:
        assert f"grpc-overhead {command}" in README or f"`{command}`" in README


#: What the README tells a user to create in the checkout: store directories
#: (``--store ./DIR``, the default ``./grpc-overhead-data``), virtual environments
#: (``python3 -m venv DIR``) and files a command writes (``> FILE``).
_CREATED = re.compile(
    r"--store \./(?P<store>[\w.-]+)|`\./(?P<named>[\w.-]+)`|python3 -m venv\s+(?P<venv>[\w.-]+)"
    r"|>\s*(?P<file>[a-z][\w-]*\.[a-z]+)\b|mkdir -p (?P<directory>[\w.-]+)"
)


def readme_created_paths() -> set[str]:
    """Each path as git sees it: directories with a trailing slash."""
    paths = set()
    for match in _CREATED.finditer(PASTED):
        kind = match.lastgroup
        paths.add(match.group(kind) + ("" if kind == "file" else "/"))
    return paths


def test_every_path_the_readme_has_a_user_create_is_ignored_by_git():
    paths = readme_created_paths()
    assert {"grpc-overhead-data/", "my-data/", "service-env/", "try-it-data/", "team/"} <= paths
    for path in sorted(paths):
        # A file inside a directory too: what `git status` would list.
        for candidate in (path, path + "inside") if path.endswith("/") else (path,):
            ignored = subprocess.run(
                ["git", "check-ignore", "--no-index", "-q", candidate], cwd=ROOT
            ).returncode
            assert ignored == 0, f"{candidate} (the README creates it) is not in .gitignore"


def test_the_readme_lists_every_page_of_the_app():
    from harness.browser import PAGES

    guide = (DOCS / "what-you-get.md").read_text()
    listed = guide.split("## The pages", 1)[1].split("\n## ", 1)[0]
    for url, title in PAGES:
        assert f"`/{url}`" in listed, url
        assert re.search(rf"^\| (\[{re.escape(title)}\]\(|{re.escape(title)} \|)", listed, re.M), (
            title
        )


def test_the_docs_give_the_query_time_limits_the_code_enforces():
    """The SQL page's time limit and that of `sql` and the HTTP interface, each from its
    one constant, as docs/what-you-get.md, docs/sql.md and docs/reliability.md state them."""
    from grpc_overhead.analyzer.insights import sql_console
    from grpc_overhead.analyzer.store.user_statements import QueryLimits

    page = f"{sql_console.PAGE_LIMITS.max_execution_time_s:g} s"
    ceiling = f"{QueryLimits().max_execution_time_s:g} s"
    pages = (DOCS / "what-you-get.md").read_text()
    sql_row = next(line for line in pages.splitlines() if line.startswith("| [SQL]"))
    assert f"stops after {page}" in sql_row and f"allow {ceiling}" in sql_row
    assert f"({QueryLimits().describe()};" in (DOCS / "sql.md").read_text()  # HTTP interface
    reliability = (ROOT / "docs" / "reliability.md").read_text()
    assert f"| {ceiling} (SQL page: {page}) |" in reliability
    assert f"at most {sql_console.MAX_LIMIT:,})" in reliability
    assert sql_console.page_limits().startswith(f"{page}, 4 GiB, the row limit")
