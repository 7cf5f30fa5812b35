"""The package ships its type information, and every place that lints the code checks the types strictly."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_ships_its_types_and_lint_checks_them_strictly() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert (ROOT / "provgraph" / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["provgraph"]
    assert project["tool"]["mypy"]["strict"] is True
    dev = " ".join(project["project"]["optional-dependencies"]["dev"])
    assert "mypy" in dev and "types-PyYAML" in dev
    ignored = {module for override in project["tool"]["mypy"]["overrides"] for module in override["module"]}
    assert ignored <= {"networkx", "networkx.*"}  # only a library without type hints is let through

    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme_stage, lint_stage = ci.index('bash -euo pipefail -c "$command"'), ci.index("\nmypy provgraph\n")
    assert readme_stage < ci.index("\nruff check provgraph tests\n") < lint_stage < ci.index("floors=")
    assert "\nruff format --check provgraph tests\n" in ci
    lint = re.search(r"\nlint:\n((?:    .*\n)+)", (ROOT / "justfile").read_text(encoding="utf-8"))
    assert lint is not None and "    mypy provgraph\n" in lint.group(1)


def test_no_type_check_is_silenced_wholesale() -> None:
    """An ignore names its error code, so a new error of another kind on that line still shows."""
    bare = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "provgraph").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"#\s*type:\s*ignore(?!\[)", line) or "# mypy: ignore-errors" in line
    ]
    assert bare == []
