"""The pure stages import only the vocabulary and each other, never the disk, the state or the orchestrator.

Read from the modules' source (every import statement, inside functions and
``TYPE_CHECKING`` blocks too), so that a type that drifts into an I/O module
and drags a pure module after it fails here rather than going unnoticed.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from conftest import importing

PACKAGE = Path(__file__).resolve().parent.parent / "provgraph"

PURE = frozenset(
    {
        "model",
        "declarations",
        "frontmatter",
        "meaning",
        "stamps",
        "index",
        "incremental",
        "lineage",
        "queries",
        "render",
        "store.cache",
        "store.lock",
    }
)
"""Modules that take data and return data: no file, no clock, no environment."""

ERRORS = "errors"
"""What a pure module may raise: the error family, beside the library's logger."""

VOCABULARY = frozenset({"model"})
"""The values the stages hand each other: they import nothing of provgraph but each other."""

EFFECTS = frozenset({"os", "sys", "time", "pathlib", "io", "shutil", "subprocess", "tempfile", "socket", "logging"})
"""Standard modules that reach the disk, the clock, the process or the log."""


def imported(source: str) -> set[str]:
    """Every module ``source`` imports, provgraph's own named ``provgraph.x``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names.add(node.module or "")
            elif node.module:
                names.add(f"provgraph.{node.module}")
            else:
                names.update(f"provgraph.{alias.name}" for alias in node.names)
    return names


def layer_violations(module: str, source: str) -> list[str]:
    """What ``module``, a pure one, imports that a pure module must not."""
    found = []
    for name in sorted(imported(source)):
        top, _, rest = name.partition(".")
        if top == "provgraph":
            inner = rest if rest in PURE else rest.split(".")[0]
            if inner not in PURE | {ERRORS} or (module in VOCABULARY and inner not in VOCABULARY):
                found.append(name)
        elif top in EFFECTS:
            found.append(name)
    return found


@pytest.mark.parametrize("module", sorted(PURE))
def test_pure_modules_import_only_the_model_and_each_other(module: str) -> None:
    source = (PACKAGE / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8")
    assert layer_violations(module, source) == []


def test_the_layer_check_sees_an_import_of_the_disk_layer_even_for_types_only() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .scan import Snapshot\nimport os\n"
    assert layer_violations("stamps", source) == ["os", "provgraph.scan"]
    assert layer_violations("model", "from .lineage import propagate\n") == ["provgraph.lineage"]
    assert layer_violations("render", "def late():\n    from . import api\n") == ["provgraph.api"]


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("provgraph", "Relative"),
        ("provgraph", "Explanation"),
        ("provgraph.api", "Explanation"),
        ("provgraph.api", "FileLineage"),
        ("provgraph.api", "Relative"),
        ("provgraph.queries", "Relative"),
        ("provgraph.queries", "FileLineage"),
        ("provgraph.scan", "Snapshot"),
        ("provgraph.scan", "SourceState"),
    ],
)
def test_values_moved_to_the_model_are_still_importable_where_they_were(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(importlib.import_module("provgraph.model"), name)


WALL_CLOCK = {("time", "time"), ("time", "time_ns"), ("datetime", "now"), ("datetime", "utcnow"), ("date", "today")}
"""Calls that read the real date and time (``time.monotonic`` measures a wait, not a date)."""


def clock_reads(source: str) -> list[str]:
    """Where ``source`` reads the wall clock or names ``PROVGRAPH_NOW`` itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            if (node.func.value.id, node.func.attr) in WALL_CLOCK:
                found.append(f"{node.func.value.id}.{node.func.attr}()")
        elif isinstance(node, ast.ImportFrom) and node.module in {"time", "datetime"}:
            found += [f"{node.module}.{alias.name}" for alias in node.names if (node.module, alias.name) in WALL_CLOCK]
        elif isinstance(node, ast.Constant) and node.value == "PROVGRAPH_NOW":
            found.append("PROVGRAPH_NOW")
    return found


def test_the_clock_is_read_in_clock_py_alone() -> None:
    """``PROVGRAPH_NOW`` is parsed once and the wall clock of the racy window is named as such:
    every other module receives ``now`` or calls ``clock.wall_ns``."""
    readers = {
        path.relative_to(PACKAGE).as_posix(): reads
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "clock.py" and (reads := clock_reads(path.read_text(encoding="utf-8")))
    }
    assert readers == {}


def test_the_clock_check_sees_each_way_of_reading_the_clock() -> None:
    source = 'import os, time\nfrom time import time_ns\nos.environ.get("PROVGRAPH_NOW")\nstarted = time.time_ns()\n'
    assert sorted(clock_reads(source)) == ["PROVGRAPH_NOW", "time.time_ns", "time.time_ns()"]
    assert clock_reads("from datetime import datetime\nnow = datetime.now()\n") == ["datetime.now()"]


OPTIONAL_SDKS = {
    "agentscope": "integrations/agentscope",
    "mcp": "integrations/mcp.py",
    "mcp_types": "integrations/mcp.py",
}
"""Each framework's package, and where alone provgraph may import it: every other module works without its extra."""


def test_each_framework_is_imported_by_its_own_integration_alone() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for name in imported(path.read_text(encoding="utf-8")):
            owner = OPTIONAL_SDKS.get(name.split(".")[0])
            assert owner is None or module.startswith(owner), f"{module} imports {name}"


def test_the_command_line_starts_without_importing_the_mcp_sdk() -> None:
    done, modules = importing("-c", "import provgraph, provgraph.cli")
    assert done.returncode == 0 and not {"mcp", "mcp_types"} & modules


def loading_compiles(source: str) -> list[str]:
    """The ``re.compile`` calls a module makes as it loads: outside every function body."""
    found: list[str] = []
    pending: list[ast.AST] = [ast.parse(source)]
    while pending:
        for child in ast.iter_child_nodes(pending.pop()):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Call) and ast.unparse(child.func) == "re.compile":
                found.append(ast.unparse(child))
            pending.append(child)
    return found


def test_no_module_compiles_a_regular_expression_as_it_loads() -> None:
    """Every command and hook event imports nearly every module, and a check of an unchanged
    folder parses no file: a pattern is compiled where it is first needed."""
    compiling = {
        path.relative_to(PACKAGE).as_posix(): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := loading_compiles(path.read_text(encoding="utf-8")))
    }
    assert compiling == {}


def test_the_compile_check_sees_a_pattern_compiled_at_load_but_not_one_in_a_function() -> None:
    source = 'import re\nA = re.compile("a")\nclass B:\n    C = re.compile("c")\ndef d():\n    return re.compile("d")\n'
    assert sorted(loading_compiles(source)) == ["re.compile('a')", "re.compile('c')"]
