"""``python -m tests.bench.sandbox``: the AgentScope middleware through a sandbox, figure by figure.

A real AgentScope workspace (``SandboxWorkspace``, in ``tests/sandbox_backend.py``)
mounted at ``/workspace`` as the agent service mounts every sandbox, with 5 ms added
to each backend call, holds a generated memory folder of 200 and 2,000 files.  The
middlewares are made by the service wiring of docs/agentscope.md, executed as written
(``service_wiring``), one pair per chat turn as the service makes them.  Each figure
is printed with its goal and met/OVER; the counts are exact, the waits one run each.
The order of the hint and the tool result in AgentScope's own middleware tests is
held by the suite, not timed here.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .generate import Workload, generate
from .measure import AGE_SECONDS, let_files_age

TESTS = Path(__file__).resolve().parent.parent
DOCS = TESTS.parent / "docs" / "agentscope.md"
SIZES = (200, 2_000)
QUICK_SIZES = {200: 20, 2_000: 60}
DELAY = 0.005
"""Seconds added to each backend call: the round trip of a sandbox."""
BUDGET = 0.5
"""The model call's budget for a check (``backend_timeout``) in the slow backend's figure."""
SLOW_LISTING = 1.5 * BUDGET
CHECKS_FOR_THE_MARK = 5
MODEL_ANSWER = 0.25
"""Seconds the model takes to answer a call, between two checks of the slow backend's figure."""
TURNS = 100
HEADER = ("figure", "size", "measured", "goal", "met/OVER")

AFTER_FAILURE = "unchanged check after one transient failure (exit status 127 at spawn)"
SLOW_WAIT = "slow backend (listing > budget): model call wait"
SLOW_MARK = "slow backend (listing > budget): checks until the mark"
FRESH = "first check of a fresh middleware on an unchanged workspace (service wiring)"
COLD = "cold check (no cache) through a shell"
INOTIFY = "inotify instances after {turns} chat turns in one service process"


class Row(NamedTuple):
    figure: str
    files: int
    measured: str
    goal: str
    met: bool


def service_wiring() -> dict[str, Any]:
    """The Python block of the "In AgentScope's agent service" section of docs/agentscope.md, executed."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## In AgentScope's agent service") :]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOCS), "exec"), namespace)
    return namespace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny folders and 5 turns: a check that it runs")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    options = parser.parse_args(argv)
    sys.path.insert(0, str(TESTS))  # the tests' AgentScope helpers import each other by module name
    logging.disable(logging.WARNING)  # the failures the figures cause on purpose are logged as warnings
    base = Path(tempfile.mkdtemp(prefix="provgraph-sandbox-bench-"))
    try:
        found = _bench(base, quick=options.quick)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(text_table(found))
    if options.markdown:
        command = " ".join(["python -m tests.bench.sandbox", *(sys.argv[1:] if argv is None else argv)])
        machine = f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}"
        print("\n" + markdown_table(found, f"Measured on {machine}, with `{command}`, the checkout in place."))
    return 0


def _bench(base: Path, *, quick: bool) -> list[Row]:
    os.environ["XDG_CACHE_HOME"] = str(base / "cache")  # the wiring's default state folder, inside the run's folder
    factory = service_wiring()["memory_middlewares"]
    turns = 5 if quick else TURNS
    found: list[Row] = []
    for size in SIZES:
        files = QUICK_SIZES[size] if quick else size
        workload = generate(base / f"host-{files}" / "Memory", files)
        let_files_age(0.0 if quick else AGE_SECONDS)
        print(f"{files:,} files", flush=True)
        found += _through_a_sandbox(factory, workload, files)
        found.append(_inotify(factory, base / f"local-{files}", workload, files, turns))
    return found


def _through_a_sandbox(factory: Callable[..., Any], workload: Workload, files: int) -> list[Row]:
    # imported here, only when the benchmark runs: AgentScope takes seconds to import
    from sandbox_backend import SandboxWorkspace

    workspace = SandboxWorkspace(str(workload.root.parent), workspace_id=f"bench-{files}", delay=DELAY)
    backend = workspace.get_backend()
    provenance = _turn(factory, workspace)
    _check(provenance)  # the first scan
    _check(provenance)  # what the first scan read is settled
    warm = _measured(backend, lambda: _check(provenance))
    fresh = _measured(backend, lambda: _check(_turn(factory, workspace)))
    backend.spawn_failures = 1
    _check(provenance)
    after_failure = _measured(backend, lambda: _check(provenance))
    shutil.rmtree(provenance.state_path)
    cold = _measured(backend, lambda: _check(_turn(factory, workspace)))
    waits, checks = _slow_backend(workspace, workload)
    return [
        Row(AFTER_FAILURE, files, _calls(after_failure), "≤ 2 calls at the next check", after_failure.calls <= 2),
        Row(SLOW_WAIT, files, _seconds(max(waits)), f"≤ the budget, {_seconds(BUDGET)}", max(waits) <= BUDGET),
        Row(SLOW_MARK, files, _checks(checks), "within 3 checks", checks is not None and checks <= 3),
        Row(FRESH, files, _against(fresh, warm), "≤ 2 calls, bytes ≤ 1.2× a warm check", _warm_enough(fresh, warm)),
        Row(COLD, files, f"{_calls(cold)}, {_size(cold.bytes)}", "≤ 3 calls", cold.calls <= 3),
    ]


class Measured(NamedTuple):
    calls: int
    bytes: int
    seconds: float


def _measured(backend: Any, action: Callable[[], object]) -> Measured:
    backend.calls = backend.bytes = 0
    started = time.perf_counter()
    action()
    return Measured(backend.calls, backend.bytes, time.perf_counter() - started)


def _turn(factory: Callable[..., Any], workspace: Any) -> Any:
    """The provenance middleware of a new chat turn, made as the service makes it."""
    _, provenance = asyncio.run(factory("user", "agent", "session", workspace))
    return provenance


def _check(provenance: Any) -> str:
    """What a model call asks of the middleware: the system prompt."""
    prompt: str = asyncio.run(provenance.on_system_prompt(None, "prompt"))
    return prompt


def _slow_backend(workspace: Any, workload: Workload) -> tuple[list[float], int | None]:
    """A stale derived file, then a listing slower than the budget: how long each model call
    waits, and at which check the mark appears (None: not within ``CHECKS_FOR_THE_MARK``)."""
    # imported here, only when the benchmark runs: AgentScope takes seconds to import
    from provgraph.integrations.agentscope import ProvenanceMiddleware

    state = workload.root.parent.parent / f"slow-state-{len(workload.files)}"
    provenance = ProvenanceMiddleware(
        workdir=workspace.workdir, backend=workspace.get_backend(), state=state, backend_timeout=BUDGET
    )
    _check(provenance)
    source = workload.root / workload.leaf
    source.write_text(source.read_text(encoding="utf-8") + "A change.\n", encoding="utf-8")
    workspace.get_backend().listing_delay = SLOW_LISTING
    try:
        return asyncio.run(_model_calls(provenance))
    finally:
        workspace.get_backend().listing_delay = 0.0


async def _model_calls(provenance: Any) -> tuple[list[float], int | None]:
    """Model calls in one event loop, as an agent makes them, each answered in ``MODEL_ANSWER`` s."""
    waits: list[float] = []
    for number in range(1, CHECKS_FOR_THE_MARK + 1):
        started = time.perf_counter()
        prompt = await provenance.on_system_prompt(None, "prompt")
        waits.append(time.perf_counter() - started)
        if "source(s) changed" in prompt:
            return waits, number
        await asyncio.sleep(MODEL_ANSWER)
    return waits, None


def _inotify(factory: Callable[..., Any], host: Path, workload: Workload, files: int, turns: int) -> Row:
    """Chat turns of a real ``Agent`` on a local workspace, with the collector off: the
    watches a turn leaves behind would pile up."""
    # imported here, only when the benchmark runs: AgentScope takes seconds to import
    from agentscope.workspace import LocalWorkspace
    from scripted_agent import ask

    shutil.copytree(workload.root, host / "Memory")
    workspace = LocalWorkspace(workdir=str(host))

    async def turn() -> None:
        middlewares = await factory("user", "agent", "session", workspace)
        await ask(middlewares, [tool for middleware in middlewares for tool in await middleware.list_tools()])

    asyncio.run(turn())
    gc.collect()
    before = _inotify_instances()
    gc.disable()
    try:
        for _ in range(turns):
            asyncio.run(turn())
        after = _inotify_instances()
    finally:
        gc.enable()
    return Row(INOTIFY.format(turns=turns), files, f"{before} before, {after} after", "no growth", after <= before)


def _inotify_instances() -> int:
    """This process's inotify instances: its descriptors that link to ``anon_inode:inotify``."""
    found = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify"
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
    return found


def _warm_enough(fresh: Measured, warm: Measured) -> bool:
    return fresh.calls <= 2 and fresh.bytes <= 1.2 * warm.bytes


def _calls(measured: Measured) -> str:
    return f"{_count(measured.calls)}, {_seconds(measured.seconds)}"


def _count(calls: int) -> str:
    return f"{calls:,} call{'' if calls == 1 else 's'}"


def _against(fresh: Measured, warm: Measured) -> str:
    ratio = fresh.bytes / warm.bytes if warm.bytes else float("inf")
    of_warm = f"{_count(warm.calls)}, {_size(warm.bytes)}"
    return f"{_calls(fresh)}, {_size(fresh.bytes)} = {ratio:.2f}× a warm check ({of_warm})"


def _checks(checks: int | None) -> str:
    return f"none within {CHECKS_FOR_THE_MARK} checks" if checks is None else f"at check {checks}"


def _seconds(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e6 else f"{count / 1e3:.0f} KB"


def _cells(row: Row) -> tuple[str, ...]:
    return (row.figure, f"{row.files:,}", row.measured, row.goal, "met" if row.met else "OVER")


def text_table(found: list[Row]) -> str:
    table = [HEADER, *map(_cells, found)]
    widths = [max(len(cells[column]) for cells in table) for column in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip() for cells in table
    )


def markdown_table(found: list[Row], preamble: str) -> str:
    lines = [preamble, "", "| " + " | ".join(HEADER) + " |", "| --- | ---: | --- | --- | --- |"]
    return "\n".join(lines + ["| " + " | ".join(_cells(row)) + " |" for row in found])


if __name__ == "__main__":
    sys.exit(main())
