"""The benchmark tool itself works: its folder generator and one quick run.

Timings are printed by the run, never asserted here: speed is judged by
reading the benchmark's figures on a known machine, not by a test.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def _load_generator():
    """``tests.bench.generate`` by its path: the benchmark is not a package pytest imports."""
    spec = importlib.util.spec_from_file_location("bench_generate", REPOSITORY / "tests" / "bench" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


generate = _load_generator().generate
FIGURES = (
    "cold status --json (whole process)",
    "warm status --json, nothing changed",
    "warm status --json, one file changed",
    "on_system_prompt, 200 files",  # the middleware, or Memory.refresh() when it cannot be imported
    "peak RSS of provgraph",
    "backend calls, nothing changed",  # through a sandbox
    "backend calls, after one edit",
    "make -q all (Makefile)",
    "dvc status (dvc.yaml)",
)


def contents(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_the_generated_folder_is_the_same_for_a_seed_and_holds_chains(tmp_path: Path) -> None:
    first = generate(tmp_path / "one", 400, seed=7)
    second = generate(tmp_path / "two", 400, seed=7)
    other = generate(tmp_path / "three", 400, seed=8)
    assert contents(first.root) == contents(second.root)
    assert contents(first.root) != contents(other.root)
    assert len(first.files) == 400 == sum(1 for _ in first.root.rglob("*.md"))
    assert 0.2 < len(first.sources) / len(first.files) < 0.4
    assert all(2 <= len(sources) <= 4 for sources in first.sources.values())
    assert first.depth >= 3, "summaries of summaries"
    assert len({path.rsplit("/", 1)[0] for path in first.files if "/" in path}) > 1
    assert first.leaf not in first.sources and any(child in first.sources for child in first.descendants(first.leaf))


def test_a_quick_run_prints_every_figure_with_its_floor_and_ratio() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench", "--quick", "--runs", "1", "--files", "300"],
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": os.fspath(REPOSITORY)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for figure in FIGURES:
        assert any(figure in line for line in lines), f"{figure!r} missing from:\n{done.stdout}"
    header = next(line for line in lines if line.startswith("figure"))
    assert all(word in header for word in ("provgraph", "floor", "ratio", "goal"))
    rows = [line for line in lines if "status --json (whole process)" in line or "status --json, " in line]
    assert rows and all(line.count("ms") == 2 and "×" in line for line in rows[:3])
