"""The benchmark tool itself works: its folder generator and one quick run.

Timings are printed by the run, never asserted here: speed is judged by
reading the benchmark's figures on a known machine, not by a test.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent


def _load(name: str):
    """``tests.bench.NAME`` by its path: the benchmark is not a package pytest imports."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPOSITORY / "tests" / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _load_generator():
    return _load("generate")


generate = _load_generator().generate
FIGURES = (
    "cold status --json, no state yet",
    "warm status --json, nothing changed",
    "stale, nothing changed",  # most derived files stale
    "warm status --json, one file changed",
    "head of a 20-deep chain changed",
    "nothing changed, per call",  # the middleware, or Memory.refresh() when it cannot be imported
    "peak RSS of provgraph",
    "backend calls, nothing changed",  # through a sandbox
    "backend calls, after one edit",
    "make -q all (Makefile)",
    "dvc status (dvc.yaml)",
)
TIMED = ("cold status", "warm status", "ProvenanceMiddleware.on_system_prompt", "Memory.refresh()")
"""The rows that time provgraph against a floor."""


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
    edited = first.sources_reaching(0.9)
    assert edited and not set(edited) & set(first.sources)
    assert len(set().union(*(first.descendants(path) for path in edited))) >= 0.9 * len(first.sources)


def _quick_run() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench", "--quick", "--runs", "2", "--files", "100", "--chain", "20"]
        + ["--agent-files", "20", "100", "--in-place", "--markdown"],
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": os.fspath(REPOSITORY)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One quick run of the whole benchmark on the code under test, read by several tests.

    Run once per session even when the tests that read it land on different parallel
    workers: the first one runs it under a lock in the folder the workers share."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _quick_run()
    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, common to its workers
    output = shared / "bench-quick-run.txt"
    with open(shared / "bench-quick-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not output.exists():
            output.write_text(_quick_run(), encoding="utf-8")
    return output.read_text(encoding="utf-8")


def test_a_quick_run_prints_every_figure_with_its_floor_and_ratio(quick_run: str) -> None:
    lines = quick_run.splitlines()
    for figure in FIGURES:
        assert any(figure in line for line in lines), f"{figure!r} missing from:\n{quick_run}"
    header = next(line for line in lines if line.startswith("figure"))
    assert all(word in header for word in ("provgraph", "floor", "ratio", "goal", "min–max"))
    rows = [line for line in lines if line.startswith(TIMED)]
    assert len(rows) == 8
    for row in rows:
        median_min_max = re.findall(r"([\d.]+) (?:ms|µs) \[([\d.]+)–([\d.]+)\]", row)
        assert len(median_min_max) == 2, row  # provgraph and its floor, each with min and max
        assert all(float(low) <= float(mid) <= float(high) for mid, low, high in median_min_max), row
        assert re.search(r"[\d.]+× ", row), row  # the ratio


def test_every_ratio_is_printed_against_its_goal_from_the_performance_issue(quick_run: str) -> None:
    expected = {
        "cold status": "≤ 2.5×",
        "warm status --json, nothing changed": "≤ 1.5×",
        "stale, nothing changed": "≤ 1.5×",
        "one file changed": "≤ 3×",
        "nothing changed, per call": "≤ 0.05×",
    }
    lines = quick_run.splitlines()
    for figure, goal in expected.items():
        row = next(line for line in lines if figure in line and "×" in line)
        assert goal in row and re.search(r"× +≤ [\d.]+× +(ok|OVER) ", row), row
    assert "goal ≤ 200 MB at 100,000 files" in quick_run


def test_the_benchmark_times_a_wheel_of_the_checkout_installed_and_compiled(tmp_path: Path) -> None:
    """By default the benchmark runs provgraph as users install it, not the checkout in place."""
    interpreter = _load("install").installed(tmp_path)
    environment = tmp_path / "venv"
    assert interpreter.provgraph == (os.fspath(environment / "bin" / "provgraph"),)
    assert "PYTHONPATH" not in interpreter.env
    package = next(environment.glob("lib/python*/site-packages/provgraph"))
    assert {path.stem for path in package.glob("*.py")} <= {
        path.name.split(".")[0] for path in package.glob("__pycache__/*.pyc")
    }
    shown = subprocess.run(
        [*interpreter.provgraph, "demo"], env=interpreter.env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "profile.md" in shown.stdout


def test_a_figure_shows_its_goal_only_at_the_sizes_it_is_set_for() -> None:
    from tests.bench.__main__ import GOAL_SIZES, GOALS, Figure

    def cold(files: int) -> Figure:
        return Figure("cold", [], [], GOALS["cold"], files=files, goal_sizes=GOAL_SIZES["cold"]).at_goal_sizes()

    assert cold(10_000).goal == GOALS["cold"]
    assert cold(1_000).goal is None and cold(1_000).within_goal
    hook = Figure("hook", [], [], GOALS["hook"], files=200)
    assert hook.at_goal_sizes().goal == GOALS["hook"]
    assert GOAL_SIZES["changed"] == (10_000, 100_000) and GOAL_SIZES["warm"] == (1_000, 10_000)
