"""The sandbox benchmark runs, and prints every figure of its table with a goal and a verdict.

What it measures is printed by the run and read in docs/performance.md, never asserted here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extras import needs

from tests.bench.sandbox import AFTER_FAILURE, COLD, FRESH, HEADER, INOTIFY, QUICK_SIZES, SLOW_MARK, SLOW_WAIT

pytestmark = needs("agentscope")

REPOSITORY = Path(__file__).resolve().parent.parent
MARKDOWN_HEADER = "| " + " | ".join(HEADER) + " |"


def rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown table that follows ``MARKDOWN_HEADER`` in ``text``."""
    lines = text.splitlines()
    start = lines.index(MARKDOWN_HEADER) + 2
    found = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        found.append([cell.strip() for cell in line.strip("|").split("|")])
    return found


def test_a_quick_run_prints_each_figure_at_each_size_with_its_goal_and_verdict() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.sandbox", "--quick", "--markdown"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = rows(done.stdout)
    figures = (AFTER_FAILURE, SLOW_WAIT, SLOW_MARK, FRESH, COLD, INOTIFY.format(turns=5))

    assert [(row[0], row[1]) for row in printed] == [
        (figure, f"{files:,}") for files in QUICK_SIZES.values() for figure in figures
    ]
    assert all(row[2] and row[3] and row[4] in ("met", "OVER") for row in printed)
    shown = rows((REPOSITORY / "docs" / "performance.md").read_text(encoding="utf-8"))
    assert {row[0] for row in shown} == {*figures[:-1], INOTIFY.format(turns=100)}
