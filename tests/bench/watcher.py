"""Temporary, for ``tests/test_agentscope_watch.py`` alone: the middleware's calls on an
unchanged local folder, with the walks it made during them (0 when the watch answered
every one).  The benchmark's own figure is ``figures.middleware_figures``; this goes
with that test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from .generate import generate
from .measure import per_call

PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class WatcherFigure:
    files: int
    measured: tuple[float, ...]
    floor: tuple[float, ...]
    walks: int


def bench_watcher(
    base: Path, walk: Callable[[str], object], rounds: int, calls: int, sizes: tuple[int, ...] = (200, 2000)
) -> list[WatcherFigure]:
    from provgraph.integrations.agentscope import ProvenanceMiddleware

    figures = []
    for size in sizes:
        memory = generate(base / f"watched-{size}" / "Memory", size, seed=4).root
        middleware = ProvenanceMiddleware(workdir=str(memory.parent))
        loop = asyncio.new_event_loop()

        async def prompts() -> None:
            for _ in range(calls):
                await middleware.on_system_prompt(None, PROMPT)  # noqa: B023

        for _ in range(3):
            loop.run_until_complete(prompts())
        walks = middleware._watched.walks
        measured, floor = [], []
        for _ in range(rounds):
            floor.append(per_call(lambda: walk(str(memory)), calls).seconds)  # noqa: B023
            measured.append(per_call(lambda: loop.run_until_complete(prompts())).seconds / calls)  # noqa: B023
        figures.append(WatcherFigure(size, tuple(measured), tuple(floor), middleware._watched.walks - walks))
        loop.close()
        middleware.close()
    return figures


def print_watcher(figures: list[WatcherFigure]) -> None:
    print("\nProvenanceMiddleware.on_system_prompt, local folder unchanged, per call, against a walk:")
    for figure in figures:
        ratio = median(figure.measured) / median(figure.floor)
        print(f"  {figure.files:>6,}  {ratio:.3f}×  ({figure.walks} walks)")
