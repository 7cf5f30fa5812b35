"""The AgentScope middleware on a local folder that did not change, answered from the watch.

For 200 and 2,000 files, ``ProvenanceMiddleware.on_system_prompt`` on an
unchanged folder (the operating system's events say nothing changed, see
``provgraph.watch``) against an in-process scandir+stat walk of the same
folder, the cost of looking at the files.  Calls are awaited one after the
other inside one coroutine, as an agent's loop awaits them; rounds of the
walk and of the middleware alternate, so a burst of load lands on both.
Medians, minimums and maximums of the per-call time of each round are
printed side by side, with the ratio of the medians.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from statistics import median

from .generate import generate

__all__ = ["GOAL_RATIO", "WatcherFigure", "bench_watcher", "print_watcher"]

SIZES = (200, 2000)
GOAL_RATIO = 0.05
PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class WatcherFigure:
    """One folder size: seconds per call of each round, for the middleware and for the walk."""

    files: int
    measured: tuple[float, ...]
    floor: tuple[float, ...]
    walks: int
    """Walks the middleware made during the timed calls: 0 when the watch answered every one."""
    doubt: str
    """Why the watch could not answer, when it could not."""

    @property
    def ratio(self) -> float:
        return median(self.measured) / median(self.floor)


def bench_watcher(
    base: Path, walk: Callable[[str], object], rounds: int, calls: int, sizes: tuple[int, ...] = SIZES
) -> list[WatcherFigure] | str:
    """The figures for each size, or why they could not be measured; ``walk(folder)`` is the
    floor, the benchmark's in-process scandir+stat walk."""
    try:
        from provgraph.integrations.agentscope import ProvenanceMiddleware
    except ImportError as error:
        return f"AgentScope is not installed ({error})"
    figures = []
    for size in sizes:
        memory = base / f"watched-{size}" / "Memory"
        generate(memory, size, seed=4)
        middleware = ProvenanceMiddleware(workdir=str(memory.parent))
        try:
            figures.append(_measure(middleware, partial(walk, str(memory)), size, rounds, calls))
        finally:
            middleware.close()
    return figures


def _measure(middleware: object, walk: Callable[[], object], size: int, rounds: int, calls: int) -> WatcherFigure:
    loop = asyncio.new_event_loop()
    try:

        async def prompts() -> None:
            for _ in range(calls):
                await middleware.on_system_prompt(None, PROMPT)  # type: ignore[attr-defined]

        def ours() -> None:
            loop.run_until_complete(prompts())

        for _ in range(3):
            ours()  # the first walk adopts every file, the next ones settle what the first wrote
        watched = middleware._watched  # type: ignore[attr-defined]
        walks_before = watched.walks
        measured, floor = [], []
        for _ in range(rounds):
            floor.append(_per_call(walk, calls))
            measured.append(_per_call(ours, 1) / calls)
        doubt = watched.watch.doubt
        return WatcherFigure(
            size, tuple(measured), tuple(floor), watched.walks - walks_before, doubt.value if doubt else ""
        )
    finally:
        loop.close()


def _per_call(call: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls


def print_watcher(figures: list[WatcherFigure] | str) -> None:
    print("\nthe watch alone: ProvenanceMiddleware.on_system_prompt, local folder unchanged (per call):")
    if isinstance(figures, str):
        print(f"  not measured: {figures}")
        return
    print(f"  {'files':>6}  {'watch median (min-max)':>26}  {'stat walk median (min-max)':>30}  {'ratio':>7}  goal")
    for figure in figures:
        verdict = "ok" if figure.ratio <= GOAL_RATIO and not figure.walks else "OVER"
        walks = f"  ({figure.walks} walks: {figure.doubt or 'events'})" if figure.walks else ""
        print(
            f"  {figure.files:>6,}  {_spread(figure.measured):>26}  {_spread(figure.floor):>30}"
            f"  {figure.ratio:>6.3f}×  ≤ {GOAL_RATIO:g}× {verdict}{walks}"
        )


def _spread(samples: tuple[float, ...]) -> str:
    return f"{median(samples) * 1e6:.1f} µs ({min(samples) * 1e6:.1f}-{max(samples) * 1e6:.1f})"
