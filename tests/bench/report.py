"""The goals, and the one table that prints each figure beside its floor and its goal.

The goals are issue 24's: a figure's ratio to its floor at most ``ratio``, at the
folder sizes the goal names; and the peak resident memory of any figure at
100,000 files.  The table is printed as text and, with ``--markdown``, as the
Markdown that docs paste.
"""

from __future__ import annotations

from dataclasses import dataclass

from .figures import (
    HOOK_READ,
    HOOK_WRITE,
    MIDDLEWARE,
    PACKAGE_IMPORT,
    PYTHON_START,
    REFRESH_CHANGED,
    REFRESH_UNCHANGED,
    STACK_IMPORT,
    STATUS_CHANGED,
    STATUS_COLD,
    STATUS_UNCHANGED,
    Timed,
)
from .measure import HASH_PROCESS, IN_PROCESS_WALK, STAT_WALK_PROCESS


@dataclass(frozen=True)
class Goal:
    figure: str
    floor: str
    ratio: float
    sizes: tuple[int, ...]


GOALS = (
    Goal(MIDDLEWARE, IN_PROCESS_WALK, 0.05, (200, 2_000)),
    Goal(REFRESH_UNCHANGED, IN_PROCESS_WALK, 1.5, (10_000,)),
    Goal(REFRESH_CHANGED, IN_PROCESS_WALK, 3.0, (10_000,)),
    Goal(HOOK_READ, STAT_WALK_PROCESS, 2.5, (1_000, 10_000)),
    Goal(HOOK_WRITE, STAT_WALK_PROCESS, 2.5, (1_000, 10_000)),
    Goal(STATUS_UNCHANGED, STAT_WALK_PROCESS, 2.5, (10_000,)),
    Goal(STATUS_CHANGED, STAT_WALK_PROCESS, 4.0, (10_000,)),
    Goal(STATUS_COLD, HASH_PROCESS, 3.5, (10_000,)),
)
RSS_FIGURE = "peak RSS, any figure"
RSS_FILES = 100_000
RSS_GOAL_MB = 200
HEADER = ("figure", "size", "floor median", "provgraph median", "ratio", "goal", "met/OVER")
NOTES = (
    f"{IN_PROCESS_WALK}: an os.scandir walk of the folder, a stat of every .md file, in provgraph's process",
    f"{STAT_WALK_PROCESS}: the same walk as a `python -c` process",
    f"{HASH_PROCESS}: a `python -c` process that walks the folder and reads and sha256-hashes every .md file",
    "peak RSS: the largest of the processes of the commands' figures and of the one that runs `Memory.refresh()`;"
    " not the middleware's, where AgentScope's own import takes about 110 MB",
)


@dataclass(frozen=True)
class Peak:
    """The largest peak RSS of the figures run on one folder, and the figure that reached it."""

    files: int
    megabytes: float
    figure: str


def rows(timed: list[Timed], peak: Peak | None) -> list[tuple[str, ...]]:
    """The table's rows, in the order of the goals; sizes as measured (``--quick`` shrinks them)."""
    found = []
    for goal in GOALS:
        for result in sorted((result for result in timed if result.figure == goal.figure), key=lambda r: r.files):
            ratio = f"{result.ratio:.3f}×" if result.ratio < 0.1 else f"{result.ratio:.2f}×"
            cells = (_duration(result.floor_median), _duration(result.median), ratio)
            met = "met" if result.ratio <= goal.ratio else "OVER"
            found.append(
                (f"{goal.figure} (floor: {goal.floor})", f"{result.files:,}", *cells, f"≤ {goal.ratio:g}×", met)
            )
    if peak is not None:
        met = "met" if peak.megabytes <= RSS_GOAL_MB else "OVER"
        figure = f"{RSS_FIGURE} (largest: {peak.figure})"
        found.append((figure, f"{peak.files:,}", "", f"{peak.megabytes:.0f} MB", "", f"≤ {RSS_GOAL_MB} MB", met))
    return found


START_FIGURES = (PYTHON_START, STACK_IMPORT, PACKAGE_IMPORT)
START_HEADER = ("what every process pays first", "size", "stat-walk process", "median", "ratio")


def start_rows(timed: list[Timed]) -> list[tuple[str, ...]]:
    """The start of a process beside the stat-walk process: no goal, the part of the process
    figures that no change to provgraph's work can take away."""
    found = [result for figure in START_FIGURES for result in timed if result.figure == figure]
    return [
        (
            result.figure,
            f"{result.files:,}",
            _duration(result.floor_median),
            _duration(result.median),
            f"{result.ratio:.2f}×",
        )
        for result in sorted(found, key=lambda result: result.files)
    ]


def start_text(found: list[tuple[str, ...]]) -> str:
    table = [START_HEADER, *found]
    widths = [max(len(row[column]) for row in table) for column in range(len(START_HEADER))]
    return "\n".join(
        "  ".join(_aligned(c, w, i) for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in table
    )


def start_markdown(found: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(START_HEADER) + " |", "| --- | ---: | ---: | ---: | ---: |"]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in found)])


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"


def text_table(found: list[tuple[str, ...]]) -> str:
    table = [HEADER, *found]
    widths = [max(len(row[column]) for row in table) for column in range(len(HEADER))]
    lines = []
    for row in table:
        cells = [_aligned(cell, width, column) for column, (cell, width) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join([*lines, "", *_notes(found)])


def _aligned(cell: str, width: int, column: int) -> str:
    """Numbers to the right; the figure, the goal and the verdict to the left."""
    return cell.ljust(width) if column in (0, 5, 6) else cell.rjust(width)


def markdown_table(found: list[tuple[str, ...]], preamble: str) -> str:
    """The table as docs show it, after one line that says where and how it was measured."""
    lines = [preamble, "", "| " + " | ".join(HEADER) + " |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    lines += ["| " + " | ".join((_code(row[0]), *row[1:])) + " |" for row in found]
    lines += ["", *(f"- {note}." for note in _notes(found))]
    return "\n".join(lines)


def _notes(found: list[tuple[str, ...]]) -> tuple[str, ...]:
    """What the floors are, and what the peak RSS row counts when there is one."""
    return NOTES if found and found[-1][0].startswith(RSS_FIGURE) else NOTES[:-1]


def _code(figure: str) -> str:
    for command in ("provgraph status --json", "Memory.refresh()"):
        figure = figure.replace(command, f"`{command}`")
    return figure
