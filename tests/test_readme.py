"""The README's promises about itself: its Quick start shape, its example output, its code."""

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


def test_quick_start_has_exactly_two_sh_blocks() -> None:
    blocks = re.findall(r"```(\w*)\n.*?```", _section("Quick start"), re.S)
    assert blocks == ["sh", "sh"]


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
