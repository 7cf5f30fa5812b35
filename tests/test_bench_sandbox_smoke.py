"""The sandbox benchmark runs, and prints every figure of its table with a goal and a verdict.

What it measures is printed by the run and read in docs/performance.md, never asserted here.
"""

from __future__ import annotations

from extras import needs
from test_bench_smoke import REPOSITORY, _table, run_bench

from tests.bench.sandbox import AFTER_FAILURE, COLD, FRESH, HEADER, INOTIFY, QUICK_SIZES, SLOW_MARK, SLOW_WAIT

pytestmark = needs("agentscope")

MARKDOWN_HEADER = "| " + " | ".join(HEADER) + " |"


def test_a_quick_run_prints_each_figure_at_each_size_with_its_goal_and_verdict() -> None:
    printed = _table(run_bench("tests.bench.sandbox", "--quick", "--markdown"), MARKDOWN_HEADER)
    figures = (AFTER_FAILURE, SLOW_WAIT, SLOW_MARK, FRESH, COLD, INOTIFY.format(turns=5))

    assert [(row[0], row[1]) for row in printed] == [
        (figure, f"{files:,}") for files in QUICK_SIZES.values() for figure in figures
    ]
    assert all(row[2] and row[3] and row[4] in ("met", "OVER") for row in printed)
    shown = _table((REPOSITORY / "docs" / "performance.md").read_text(encoding="utf-8"), MARKDOWN_HEADER)
    assert {row[0] for row in shown} == {*figures[:-1], INOTIFY.format(turns=100)}
