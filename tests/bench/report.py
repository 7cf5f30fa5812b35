"""The README's Performance tables, written from one run's figures (``--markdown``).

A figure in the README is one the benchmark printed: paste this output over the
tables, and the machine, the date, the load and the command line come with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAIN_HEADER = "| figure | files | provgraph | floor | ratio | goal | CPU ratio |"
SANDBOX_TITLE = "| `ProvenanceMiddleware.on_system_prompt` through a sandbox"
OTHERS_HEADER = "| the same question on the same lineage, after the edits | files | wall time, median | note |"


@dataclass(frozen=True)
class Peak:
    """Peak resident memory of each whole-process figure on one folder size, in MB."""

    files: int
    megabytes: dict[str, float]


@dataclass(frozen=True)
class Other:
    """Another tool asked whether anything is out of date, or why it was not timed."""

    name: str
    files: int
    seconds: float | None
    note: str


@dataclass(frozen=True)
class Measured:
    """Everything one run prints in the README."""

    command: str
    machine: str
    timed: str
    figures: list[Any]
    """``Figure`` values of ``__main__`` (not imported here: ``python -m`` runs that module as ``__main__``)."""
    peaks: list[Peak]
    rss_goal: str
    sandbox: str
    others: list[Other]


def markdown_tables(run: Measured) -> str:
    """The intro line and the three tables, in the README's words."""
    lines = [f"Measured on {run.machine}, provgraph from {run.timed}:", f"`{run.command}`.", ""]
    lines += [MAIN_HEADER, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [_figure_row(figure) for figure in run.figures]
    lines += [_peak_row(peak, run.rss_goal) for peak in run.peaks]
    lines += ["", run.sandbox, "", OTHERS_HEADER, "| --- | ---: | ---: | --- |"]
    lines += [_other_row(other) for other in run.others]
    return "\n".join(lines) + "\n"


def _figure_row(figure: Any) -> str:
    digits = 0 if figure.wall * figure.scale >= 100 else 1 if figure.wall * figure.scale >= 1 else 2
    cells = (
        f"{_code(figure.name)} (floor: {figure.floor_name})",
        f"{figure.files:,}",
        figure.shown(figure.measured, digits),
        figure.shown(figure.floor, digits),
        _ratio(figure.ratio),
        f"≤ {figure.goal:g}×" if figure.goal is not None else "",
        _ratio(figure.cpu_ratio),
    )
    return "| " + " | ".join(cells) + " |"


def _ratio(value: float) -> str:
    return f"{value:.2f}×" if value < 0.1 else f"{value:.1f}×"


def _peak_row(peak: Peak, goal: str) -> str:
    names = " / ".join(peak.megabytes)
    values = " / ".join(f"{value:.0f}" for value in peak.megabytes.values())
    return f"| peak RSS of `status --json` ({names}) | {peak.files:,} | {values} MB | | | {goal} | |"


def _other_row(other: Other) -> str:
    shown = "n/a" if other.seconds is None else f"{other.seconds * 1e3:.0f} ms"
    return f"| {_code(other.name)} | {other.files:,} | {shown} | {other.note} |"


def _code(name: str) -> str:
    """Commands and methods as code: ``status --json``, ``on_system_prompt``, ``make -q all``."""
    words = ("status --json", "ProvenanceMiddleware.on_system_prompt", "Memory.refresh()", "make -q all")
    for word in (*words, "PROVGRAPH_PROCESSES=1"):
        name = name.replace(word, f"`{word}`")
    return name.replace("dvc status", "`dvc status`")
