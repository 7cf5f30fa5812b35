"""``python -m tests.bench.mcp_server``: the MCP server's start and its tool call on an unchanged folder.

The checkout's code in place, on a generated folder (1,000 files unless ``--files``):

- **start**: from starting ``provgraph mcp ROOT`` as a process to the end of the
  handshake with the SDK's own client over stdio (the handshake of clients before
  protocol 2026-07-28, which is what they speak today), then to its first answer
  (``list_stale_memories``, the folder's state kept from an earlier run), beside a
  process that only imports the SDK's server;
- **tool call, nothing changed**: one ``list_stale_memories`` round trip over stdio,
  beside its floor, the SDK's own ``ping`` round trip on the same connection;
- **in process**: the server's answer to that call without the transport
  (``MemoryServer.call``), and to ``memory_index_problems`` (the generated folder's
  ``MEMORY.md``), each beside the AgentScope middleware's check per model call on the
  same folder (``on_system_prompt``), the cost the issue holds it to.

Each pair alternates, so that a busy machine slows both; the medians and their ratio are
printed.  Timings are never asserted.  (Not ``mcp.py``: ``inprocess.py`` runs as a script
from this folder, where a module of that name would hide the SDK from AgentScope.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from .generate import generate
from .install import REPOSITORY
from .measure import AGE_SECONDS, let_files_age, per_call, run

LIST, INDEX = "list_stale_memories", "memory_index_problems"
SDK_IMPORT = "import mcp.server.lowlevel, mcp.server.stdio"
"""The floor of a start: a process that only imports what the server is built on."""
BATCH = 20
"""In-process calls timed together: one is too short for the clock."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.mcp_server", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000, help="memory files in the folder (default 1000)")
    parser.add_argument("--runs", type=int, default=7, help="starts timed (default 7)")
    parser.add_argument("--calls", type=int, default=200, help="calls timed for each call figure (default 200)")
    parser.add_argument("--quick", action="store_true", help="no wait for the files to age: a check that it runs")
    options = parser.parse_args(argv)
    age = 0.0 if options.quick else AGE_SECONDS
    warnings.filterwarnings("ignore", "ping is removed")  # the floor of a call, under the handshake it times
    with tempfile.TemporaryDirectory(prefix="provgraph-bench-mcp-") as base:
        root = generate(Path(base) / "memory", options.files).root
        rows = anyio.run(_over_stdio, root, options.runs, options.calls, age)
        rows += _in_process(root, options.calls)
    print(f"MCP server on {options.files:,} memory files ({sys.executable}, the checkout in place)")
    for figure, median, floor_name, floor in rows:
        ratio = f"{median / floor:.2f}×" if floor else "-"
        against = f"{floor_name} {_shown(floor)}" if floor else ""
        print(f"  {figure:<44} {_shown(median):>10}   {against:<42} {ratio}")
    return 0


def _server(root: Path) -> Any:
    from mcp import Client, StdioServerParameters  # the mcp extra, which only this figure needs

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))}
    command = StdioServerParameters(command=sys.executable, args=["-m", "provgraph", "mcp", str(root)], env=env)
    return Client(command, read_timeout_seconds=60, mode="legacy")  # the handshake today's clients use


async def _over_stdio(root: Path, runs: int, calls: int, age: float) -> list[tuple[str, float, str, float]]:
    async with _server(root) as client:  # the first scan writes the state the timed starts find
        await client.call_tool(LIST, {})
    let_files_age(age)
    handshakes, answers, imports = [], [], []
    for _ in range(runs):
        imports.append(run([sys.executable, "-c", SDK_IMPORT], os.environ.copy()).seconds)
        started = time.perf_counter()
        async with _server(root) as client:
            handshakes.append(time.perf_counter() - started)
            await client.call_tool(LIST, {})
            answers.append(time.perf_counter() - started)
    async with _server(root) as client:
        await client.call_tool(LIST, {})
        pings, tools = await _alternate(calls, client.send_ping, lambda: client.call_tool(LIST, {}))
    return [
        ("start: handshake done", statistics.median(handshakes), "SDK import process", statistics.median(imports)),
        ("start: first answer", statistics.median(answers), "SDK import process", statistics.median(imports)),
        (
            "tool call over stdio, nothing changed",
            statistics.median(tools),
            "ping round trip",
            statistics.median(pings),
        ),
    ]


async def _alternate(
    calls: int, floor: Callable[[], Awaitable[object]], measured: Callable[[], Awaitable[object]]
) -> tuple[list[float], list[float]]:
    floors, samples = [], []
    for _ in range(calls):
        for call, seconds in ((floor, floors), (measured, samples)):
            started = time.perf_counter()
            await call()
            seconds.append(time.perf_counter() - started)
    return floors, samples


def _in_process(root: Path, calls: int) -> list[tuple[str, float, str, float]]:
    from provgraph.integrations.agentscope import ProvenanceMiddleware  # AgentScope: seconds to import
    from provgraph.integrations.mcp import MemoryServer  # the MCP SDK: imported for these figures alone

    server = MemoryServer(root)
    middleware = ProvenanceMiddleware(workdir=str(root.parent), memory_dir=root.name)
    loop = asyncio.new_event_loop()

    async def prompts(count: int) -> None:
        for _ in range(count):
            await middleware.on_system_prompt(None, "You are a helpful assistant.")

    def checks_of(count: int) -> object:  # awaited in a running loop, as an agent awaits them
        return loop.run_until_complete(prompts(count))

    checks_of(3)  # the first calls scan and settle what they wrote
    answers: dict[str, list[float]] = {LIST: [], INDEX: []}
    checks = []
    for tool in answers:
        per_call(partial(server.call, tool, {}), 3)
    for _ in range(max(1, calls // BATCH)):
        checks.append(per_call(lambda: checks_of(BATCH)).seconds / BATCH)
        for tool, seconds in answers.items():
            seconds.append(per_call(partial(server.call, tool, {}), BATCH).seconds)
    server.close()
    middleware.close()
    loop.close()
    check = statistics.median(checks)
    return [
        ("tool call in process, nothing changed", statistics.median(answers[LIST]), "middleware check", check),
        ("index tool in process, nothing changed", statistics.median(answers[INDEX]), "middleware check", check),
    ]


def _shown(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


if __name__ == "__main__":
    sys.exit(main())
