"""``python -m tests.bench``: each figure of the goal table beside its floor and its goal.

provgraph is timed as users run it: a wheel of the checkout is built and
installed into a fresh virtual environment with its bytecode compiled
(``install.py``), and both the commands and the in-process figures run that
install (``--in-place`` times the checkout's code in place instead).  Each
figure is measured beside its floor (``measure.py``) in the same run, on the same
folder; runs of the two alternate, so that a busy machine slows both, and the
table gives their medians and the ratio of the medians against the goal
(``report.py``).  The AgentScope middleware is timed on folders of 200 and 2,000
files; the other figures at the sizes of ``--files`` their goal names, 1,000 and
10,000 files; ``--files ... 100000`` runs every figure but the middleware once
on 100,000 files, for the peak RSS row.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .figures import (
    REFRESH_CHANGED,
    REFRESH_UNCHANGED,
    Timed,
    middleware_figures,
    process_figures,
    refresh_figures,
    start_figures,
)
from .generate import Workload, generate
from .install import Interpreter, in_place, installed
from .measure import AGE_SECONDS, let_files_age
from .report import GOALS, RSS_FILES, Peak, markdown_table, rows, start_markdown, start_rows, start_text, text_table

SIZES = (1_000, 10_000)
MIDDLEWARE_SIZES = (200, 2_000)
QUICK_SIZES = {200: 20, 2_000: 60, 1_000: 40, 10_000: 100, RSS_FILES: 150}
"""``--quick`` times tiny folders in place of the goal's sizes: a check of the benchmark itself."""


def main(argv: list[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    options.command = " ".join(["python -m tests.bench", *(sys.argv[1:] if argv is None else argv)])
    base = Path(tempfile.mkdtemp(prefix="provgraph-bench-"))
    try:
        _bench(options, base)
    finally:
        if options.keep:
            print(f"folders kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files",
        type=int,
        nargs="+",
        default=list(SIZES),
        choices=[*SIZES, RSS_FILES],
        metavar="N",
        help="folder sizes of the figures but the middleware's (default 1000 10000; 100000 adds the peak RSS row)",
    )
    parser.add_argument(
        "--runs", type=int, help="alternating runs of each figure and its floor (default 7; 1 with --quick)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny folders, one run: a check that the benchmark runs")
    parser.add_argument("--in-place", action="store_true", help="time the checkout in place, not installed")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated folders (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the generated folders")
    return parser


def _bench(options: argparse.Namespace, base: Path) -> None:
    started, load = time.perf_counter(), os.getloadavg()[0]
    runs = options.runs or (1 if options.quick else 7)
    age = 0.0 if options.quick else AGE_SECONDS

    def size(files: int) -> int:
        return QUICK_SIZES[files] if options.quick else files

    interpreter = in_place() if options.in_place else installed(base / "install")
    print(f"provgraph benchmark: {runs} alternating runs of each figure and its floor, medians")
    print(f"provgraph timed: {interpreter.description}")
    middleware_sizes = [size(files) for files in MIDDLEWARE_SIZES]
    timed = middleware_figures(base, middleware_sizes, interpreter, rounds=4 * runs, age=age)
    peak, starts = None, []
    for files in sorted(set(options.files)):
        workload = generate(base / f"memory-{files}", size(files), options.seed)
        print(f"{len(workload.files):,} files, {len(workload.sources):,} derived, longest chain {workload.depth}")
        if files == RSS_FILES:
            peak = _peak(_on_folder(workload, files, base, interpreter, 1, age))
        else:
            timed += _on_folder(workload, files, base, interpreter, runs, age)
            starts += start_figures(workload, interpreter, runs)
    table = rows(timed, peak)
    print("\n" + text_table(table))
    if starts:
        print("\n" + start_text(start_rows(starts)))
    machine = _machine(load)
    print(f"\nmachine: {machine}")
    if options.markdown:
        how = "the checkout in place" if options.in_place else "a non-editable install, bytecode compiled"
        print("\n" + markdown_table(table, f"Measured on {machine}, provgraph from {how}: `{options.command}`."))
        if starts:
            print("\n" + start_markdown(start_rows(starts)))
    print(f"\nbenchmark time: {time.perf_counter() - started:.0f} s")


def _on_folder(
    workload: Workload, files: int, base: Path, interpreter: Interpreter, runs: int, age: float
) -> list[Timed]:
    """The figures whose goal names ``files`` (at ``RSS_FILES``, every one but the middleware's)."""
    wanted = {goal.figure for goal in GOALS if files in goal.sizes or files == RSS_FILES}
    let_files_age(age)
    found = process_figures(workload, interpreter, runs, wanted)
    if REFRESH_UNCHANGED in wanted:
        let_files_age(age)  # past the edits of the commands' figures
        found += refresh_figures(workload, base / f"state-{files}", interpreter, 3 * runs)
    return found


def _peak(found: list[Timed]) -> Peak:
    largest = max(found, key=lambda result: result.peak_rss_mb)
    figure = largest.figure
    if figure in (REFRESH_UNCHANGED, REFRESH_CHANGED):  # one process runs both, after a first scan
        figure = "the process of the Memory.refresh() figures, its first scan included"
    return Peak(largest.files, largest.peak_rss_mb, figure)


def _machine(load_at_start: float) -> str:
    return (
        f"{os.cpu_count()} cores ({_cpu_model()}), Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')},"
        f" load average {load_at_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
