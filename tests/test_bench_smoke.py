"""The benchmark tool itself works: its folder generator, its install, and one quick run.

Timings are printed by the run, never asserted here: speed is judged by
reading the benchmark's figures on a known machine, not by a test.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.__main__ import QUICK_SIZES
from tests.bench.generate import generate
from tests.bench.install import installed

REPOSITORY = Path(__file__).resolve().parent.parent
HEADER = "| figure | size | floor median | provgraph median | ratio | goal | met/OVER |"
GOAL_TABLE = (  # issue 24's goals: figure, floor, goal, folder sizes
    ("AgentScope middleware per model call, nothing changed", "in-process stat walk", "≤ 0.05×", (200, 2_000)),
    ("`Memory.refresh()` in process, nothing changed", "in-process stat walk", "≤ 1.5×", (10_000,)),
    ("`Memory.refresh()` in process, one file changed", "in-process stat walk", "≤ 3×", (10_000,)),
    ("Claude Code hook per PostToolUse event: Read", "stat-walk process", "≤ 2.5×", (1_000, 10_000)),
    (
        "Claude Code hook per PostToolUse event: Write of a derived file",
        "stat-walk process",
        "≤ 2.5×",
        (1_000, 10_000),
    ),
    ("`provgraph status --json`, nothing changed", "stat-walk process", "≤ 2.5×", (10_000,)),
    ("`provgraph status --json`, one file changed", "stat-walk process", "≤ 4×", (10_000,)),
    ("`provgraph status --json`, cold", "read + sha256 process", "≤ 3.5×", (10_000,)),
)
DURATION = r"[\d.]+ (?:µs|ms)"


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
    assert first.leaf not in first.sources and any(first.leaf in sources for sources in first.sources.values())
    assert first.derived in first.sources
    assert (first.root / first.derived).read_text().startswith("---\n")


def run_bench(module: str, *options: str) -> str:
    """What ``python -m module options`` prints, in the checkout; the run must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", module, *options],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _quick_run() -> str:
    return run_bench("tests.bench", "--quick", "--in-place", "--markdown", "--files", "1000", "10000", "100000")


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


def _table(text: str, header: str = HEADER) -> list[list[str]]:
    """The cells of each row of the Markdown table the benchmark prints (the one under ``header``)."""
    lines = text.splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_a_quick_run_prints_each_figure_of_the_goal_table_with_its_floor_and_goal(quick_run: str) -> None:
    rows = _table(quick_run)
    expected = [
        (f"{figure} (floor: {floor})", f"{QUICK_SIZES[size]:,}", goal)
        for figure, floor, goal, sizes in GOAL_TABLE
        for size in sizes
    ]
    assert [(row[0], row[1], row[5]) for row in rows[:-1]] == expected
    for row in rows[:-1]:
        assert re.fullmatch(DURATION, row[2]) and re.fullmatch(DURATION, row[3]), row
        assert re.fullmatch(r"[\d.]+×", row[4]) and row[6] in ("met", "OVER"), row
    peak = rows[-1]
    assert peak[0].startswith("peak RSS, any figure (largest: ") and peak[1] == f"{QUICK_SIZES[100_000]:,}"
    assert re.fullmatch(r"\d+ MB", peak[3]) and peak[5] == "≤ 200 MB" and peak[6] in ("met", "OVER")


def test_the_text_table_holds_the_same_rows(quick_run: str) -> None:
    """The text table (columns two spaces apart or more) and the Markdown one say the same."""
    lines = quick_run.splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith("figure  "))
    text_rows = [re.split(r" {2,}", line) for line in lines[start : lines.index("", start)]]
    assert text_rows[0] == ["figure", "size", "floor median", "provgraph median", "ratio", "goal", "met/OVER"]
    expected = [[cell.replace("`", "") for cell in row if cell] for row in _table(quick_run)]
    assert text_rows[1:] == expected


def test_a_document_that_shows_the_table_shows_rows_the_benchmark_prints(quick_run: str) -> None:
    """A figure in the docs is one the benchmark printed: pasted from ``--markdown`` (the
    peak memory's row names whichever process peaked highest in that run)."""

    def figure(row: list[str]) -> str:
        return re.sub(r"\d[\d,.]*", "N", re.sub(r"\(largest: .*\)", "(largest: ...)", row[0]))

    printed = set(map(figure, _table(quick_run)))
    assert HEADER in (REPOSITORY / "README.md").read_text(encoding="utf-8")
    for document in [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("**/*.md"))]:
        text = document.read_text(encoding="utf-8")
        if HEADER in text:
            shown = set(map(figure, _table(text)))
            assert shown <= printed, document


def test_the_benchmark_times_a_wheel_of_the_checkout_installed_and_compiled(tmp_path: Path) -> None:
    """By default the benchmark runs provgraph as users install it, not the checkout in place."""
    interpreter = installed(tmp_path)
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
