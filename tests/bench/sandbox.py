"""The AgentScope middleware through a sandbox whose every call costs a round trip.

The backend is ``SandboxBackend`` (tests/sandbox_backend.py), a real
``BackendBase`` subclass over a local folder, with 5 ms added to each call.
For 200 and 2,000 files it prints, beside their goals: the backend calls of
an unchanged check and their time against the memory middleware's own
``on_system_prompt`` on the same backend, and the backend calls of a check
after one edit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from .generate import Workload, generate
from .report import SANDBOX_TITLE

SIZES = (200, 2000)
DELAY = 0.005
GOAL_UNCHANGED_CALLS = 3
GOAL_EDITED_CALLS = 5
GOAL_RATIO = 4.0
PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class SandboxFigures:
    """One folder size: calls and times of the checks, the memory middleware's time beside them."""

    files: int
    unchanged_calls: int
    edited_calls: int
    unchanged_seconds: float
    memory_seconds: float

    @property
    def ratio(self) -> float:
        return self.unchanged_seconds / self.memory_seconds


def bench_sandbox(
    base: Path, rounds: int, age: float = 2.2, sizes: tuple[int, ...] = SIZES
) -> list[SandboxFigures] | str:
    """The figures for each size, or why they could not be measured."""
    try:
        from agentscope.middleware import AgenticMemoryMiddleware

        from provgraph.integrations.agentscope import ProvenanceMiddleware

        from ..sandbox_backend import SandboxBackend
    except ImportError as error:
        return f"AgentScope is not installed ({error})"
    workloads = [generate(base / f"sandbox-{size}" / "Memory", size, seed=3) for size in sizes]
    time.sleep(age)  # let the files age past the racy window, as in the other warm figures
    figures = []
    for workload in workloads:
        backend = SandboxBackend(delay=DELAY)
        memory = AgenticMemoryMiddleware(workdir=str(workload.root.parent), backend=backend)
        provenance = ProvenanceMiddleware.from_memory_middleware(memory, state=workload.root.parent / "state.json")
        figures.append(_measure(workload, backend, memory, provenance, rounds))
    return figures


def _measure(workload: Workload, backend: Any, memory: Any, provenance: Any, rounds: int) -> SandboxFigures:
    loop = asyncio.new_event_loop()
    try:
        ours = _call(loop, lambda: provenance.on_system_prompt(None, PROMPT))
        theirs = _call(loop, lambda: memory.on_system_prompt(None, PROMPT))
        theirs(), ours()  # the memory middleware lays out its folder; provgraph adopts every file
        mine, others, calls = [], [], []
        for _ in range(rounds):
            others.append(_timed(theirs))
            before = backend.calls
            mine.append(_timed(ours))
            calls.append(backend.calls - before)
        edited = []
        for number in range(3):
            with open(workload.root / workload.leaf, "a", encoding="utf-8") as handle:
                handle.write(f"An edit ({number}).\n")
            before = backend.calls
            ours()
            edited.append(backend.calls - before)
    finally:
        loop.close()
    return SandboxFigures(len(workload.files), max(calls), max(edited), median(mine), median(others))


def _call(loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine]) -> Callable[[], object]:
    return lambda: loop.run_until_complete(make())


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def print_sandbox(figures: list[SandboxFigures] | str) -> None:
    print(f"\nAgentScope through a sandbox ({DELAY * 1e3:g} ms per backend call), per on_system_prompt:")
    if isinstance(figures, str):
        print(f"  n/a: {figures}")
        return
    print(f"  {'files':>6} {'figure':<40} {'measured':>10} {'goal':>8}")
    for figure in figures:
        rows = (
            ("backend calls, nothing changed", f"{figure.unchanged_calls}", GOAL_UNCHANGED_CALLS, ""),
            ("backend calls, after one edit", f"{figure.edited_calls}", GOAL_EDITED_CALLS, ""),
            (
                f"time, nothing changed (memory mw {figure.memory_seconds * 1e3:.1f} ms)",
                f"{figure.ratio:.1f}×",
                GOAL_RATIO,
                "×",
            ),
        )
        values = (figure.unchanged_calls, figure.edited_calls, figure.ratio)
        for (name, shown, goal, unit), value in zip(rows, values, strict=True):
            verdict = "ok" if value <= goal else "OVER"
            print(f"  {figure.files:>6} {name:<40} {shown:>10} {f'≤ {goal:g}{unit}':>8} {verdict}")


def markdown_sandbox(figures: list[SandboxFigures] | str) -> str:
    """The README's sandbox table: one column per folder size."""
    title = f"{SANDBOX_TITLE}, {DELAY * 1e3:g} ms per call"
    if isinstance(figures, str):
        return f"{title} | |\n| --- | --- |\n| n/a | {figures} |"
    sizes = "".join(f" {figure.files:,} files |" for figure in figures)
    memory = " / ".join(f"{figure.memory_seconds * 1e3:.1f}" for figure in figures)
    rows = [
        ("backend calls, nothing changed", [f"{f.unchanged_calls}" for f in figures], f"≤ {GOAL_UNCHANGED_CALLS}"),
        ("backend calls, after one edit", [f"{f.edited_calls}" for f in figures], f"≤ {GOAL_EDITED_CALLS}"),
        (
            f"time, nothing changed, against the memory middleware's `on_system_prompt` ({memory} ms)",
            [f"{f.ratio:.1f}×" for f in figures],
            f"≤ {GOAL_RATIO:g}×",
        ),
    ]
    lines = [f"{title} |{sizes} goal |", "| --- |" + " ---: |" * (len(figures) + 1)]
    lines += [f"| {name} | {' | '.join(values)} | {goal} |" for name, values, goal in rows]
    return "\n".join(lines)
