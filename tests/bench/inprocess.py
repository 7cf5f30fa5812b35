"""The in-process figures, in a process of the interpreter under test.

Run as a script, not as ``-m tests.bench...``, so that the folder on ``sys.path``
is this one, not the checkout, and ``import provgraph`` finds the install being
timed.  It prints, as JSON, the seconds of each run of the floor (an in-process
stat walk) and of provgraph, alternating:

    python inprocess.py refresh ROOT STATE RUNS
        Memory(ROOT, state=STATE).refresh(), nothing changed, then after a change
    python inprocess.py middleware ROUNDS CALLS MEMORY...
        ProvenanceMiddleware.on_system_prompt on each unchanged MEMORY folder
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from measure import Edits, Sample, alternate, per_call, stat_walk  # this script's folder is on sys.path

from provgraph import Memory

PROMPT = "You are a helpful assistant."


def refresh(root: str, state: str, runs: int, source: str) -> dict[str, object]:
    memory = Memory(root, state=state)
    memory.refresh()  # the first scan, with no state yet
    edit = Edits(Path(root) / source)

    def floor() -> Sample:
        return per_call(lambda: stat_walk(root))

    def unchanged() -> Sample:
        return per_call(memory.refresh)

    def changed() -> Sample:
        edit()
        return per_call(memory.refresh)

    timed = {"unchanged": _seconds(alternate(runs, floor, unchanged))}
    changed()  # settles the first change
    return timed | {"changed": _seconds(alternate(runs, floor, changed))}


def middleware(rounds: int, calls: int, folders: list[str]) -> dict[str, object]:
    """Per model call: ``calls`` calls awaited one after the other in a running event loop,
    as an agent awaits them (a loop started for each call would time the loop)."""
    # imported here, only for this figure: AgentScope takes seconds to import
    from provgraph.integrations.agentscope import ProvenanceMiddleware

    loop = asyncio.new_event_loop()
    timed = {}
    for folder in folders:
        memory = Path(folder)
        provenance = ProvenanceMiddleware(workdir=str(memory.parent), memory_dir=memory.name)

        async def prompts(count: int) -> None:
            for _ in range(count):
                await provenance.on_system_prompt(None, PROMPT)  # noqa: B023

        def measured() -> Sample:
            batch = per_call(lambda: loop.run_until_complete(prompts(calls)))  # noqa: B023
            return Sample(batch.seconds / calls)

        def floor() -> Sample:
            return per_call(lambda: stat_walk(folder), calls)  # noqa: B023

        loop.run_until_complete(prompts(3))  # the first call scans, the next ones settle what it wrote
        timed[folder] = _seconds(alternate(rounds, floor, measured))
        provenance.close()
    loop.close()
    return timed


def _seconds(samples: tuple[list[Sample], list[Sample]]) -> dict[str, list[float]]:
    floor, measured = samples
    return {"floor": [sample.seconds for sample in floor], "measured": [sample.seconds for sample in measured]}


if __name__ == "__main__":
    figure, *arguments = sys.argv[1:]
    if figure == "refresh":
        root, state, runs, source = arguments
        printed = refresh(root, state, int(runs), source)
    else:
        rounds, calls, *folders = arguments
        printed = middleware(int(rounds), int(calls), folders)
    print(json.dumps(printed))
