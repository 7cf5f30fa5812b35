"""CONTRIBUTING.md's code map names the modules as they are: every module of the package, and no other."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "provgraph"


def _code_map() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("\n## The code map\n")
    return text[start : text.index("\n## ", start + 1)]


def test_the_code_map_names_every_module_and_only_modules_that_exist() -> None:
    named = {name for name in re.findall(r"`((?:\w+/)?\w+\.py)`", _code_map()) if not name.startswith("tests/")}
    modules = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}
    dunder = {module for module in modules | named if module.rsplit("/", 1)[-1] in {"__init__.py", "__main__.py"}}

    absent, unplaced = sorted(named - dunder - modules), sorted(modules - dunder - named)
    assert not absent, f"the code map names modules that do not exist: {absent}"
    assert not unplaced, f"modules the code map does not place: {unplaced}"
