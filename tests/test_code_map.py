"""The README's code map names the modules as they are."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_code_map_names_every_module_and_only_modules_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code_map = readme[readme.index("The code reads in the order the data flows") :]
    named = {name.removeprefix("integrations/") for name in re.findall(r"`((?:integrations/)?\w+\.py)`", code_map)}
    package = ROOT / "provgraph"
    core = {path.name for path in package.glob("*.py")}
    integrations = {path.name for path in package.glob("integrations/*.py")}

    assert named <= core | integrations
    assert core - {"__init__.py", "__main__.py"} <= named, "a module the code map does not place"
    assert integrations - {"__init__.py"} <= named
