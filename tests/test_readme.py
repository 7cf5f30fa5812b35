"""The README's promises about itself: short, its Quick start shape, its sections, its example output, its code."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from provgraph.demo import build_demo_memory, run_demo

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def _section(heading: str) -> str:
    start = README.index(f"\n## {heading}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end >= 0 else None]


SECTIONS = [
    "Quick start",
    "On your own folder",
    "Commands",
    "AgentScope",
    "Claude Code",
    "MCP clients",
    "Python API",
    "Guarantees",
    "Performance",
    "Development",
]


def test_the_readme_is_read_in_ten_minutes() -> None:
    """At most 25 KB, in the sections a newcomer looks for, and no test names in its prose."""
    assert len(README.encode("utf-8")) <= 25_000
    outside_code = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M)
    assert re.findall(r"^## (.*)$", outside_code, re.M) == SECTIONS
    assert re.findall(r"\btest_\w+", README) == []


def test_quick_start_has_exactly_two_sh_blocks() -> None:
    """The first installs and runs the demo; the second installs what the tests need and runs them."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", _section("Quick start"), re.S)
    assert [language for language, _ in blocks] == ["sh", "sh"]
    assert blocks[0][1].strip() == "pip install . && provgraph demo"
    assert blocks[1][1].startswith("pip install '.[dev") and "python -m pytest" in blocks[1][1]


def test_on_your_own_folder_names_the_option_a_reme_folder_needs_and_the_wiki_links() -> None:
    steps = _section("On your own folder")
    assert "provgraph status" in steps and "derived_from:" in steps
    assert "--sources-heading" in steps and "ReMe" in steps
    assert "[[user-facts]]" in steps and "Obsidian" in steps


def test_the_example_output_is_what_the_demo_prints() -> None:
    """Every line of the command-line example is printed by `provgraph demo` (same dates, same words)."""
    example = re.search(r"A week after `user-facts.md` changed:\n\n```text\n(.*?)```", README, re.S)
    assert example is not None
    out = io.StringIO()
    assert run_demo(out) == 0
    printed = set(out.getvalue().splitlines())
    lines = [line for line in example.group(1).splitlines() if line and not line.startswith("$ ")]
    assert len(lines) > 15
    assert [line for line in lines if line not in printed] == []


@pytest.fixture
def demo_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's folder at the README's path, with one fact changed after the first look."""
    root = tmp_path / "path/to/Memory"
    root.mkdir(parents=True)
    build_demo_memory(root)
    monkeypatch.chdir(tmp_path)
    return root


def test_the_python_api_examples_run(demo_memory: Path) -> None:
    from provgraph import Memory

    Memory(demo_memory).refresh()
    facts = demo_memory / "user-facts.md"
    facts.write_text(facts.read_text() + "- Moved to Paris.\n", encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", _section("Python API"), re.S)
    assert len(blocks) == 2
    namespace: dict = {}
    printed = io.StringIO()
    namespace["print"] = lambda *args: printed.write(" ".join(map(str, args)) + "\n")
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - the README's own examples
    assert "digest.md" in printed.getvalue()
    memory = namespace["memory"]
    assert [entry.path for entry in memory.stale_after_editing("user-facts.md", report=memory.refresh())] == []
    assert os.path.exists("path/to/Memory/provgraph.lock")
