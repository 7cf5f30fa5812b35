"""The MCP SDK's own client of ``provgraph mcp ROOT``, started as a process of its own running the code under test."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

NOW = "2024-03-01T12:00:00+00:00"
"""The server's clock (``PROVGRAPH_NOW``): every date it shows is 2024-03-01."""
STALE, GRAPH, INDEX = "provgraph://stale", "provgraph://graph", "provgraph://index"
TIMEOUT = 30


def serving(root: Path, *options: str, lock_wait: float | None = None, **client: Any) -> Any:
    """The client, to enter with ``async with``; ``client`` are ``mcp.Client``'s options.
    ``lock_wait`` shortens how long a call waits for the store's lock, for a test of a busy lock."""
    from mcp import Client, StdioServerParameters  # the mcp extra: imported by the tests that run

    start = ["-m", "provgraph"]
    if lock_wait is not None:
        patched = f"import runpy, provgraph.api as a; a.READ_WAIT = a.WRITE_WAIT = {lock_wait}"
        start = ["-c", f"{patched}; runpy.run_module('provgraph', run_name='__main__')"]
    command = StdioServerParameters(
        command=sys.executable,
        args=[*start, "mcp", os.fspath(root), *options],
        env={**os.environ, "PROVGRAPH_NOW": NOW},
    )
    return Client(command, read_timeout_seconds=TIMEOUT, **client)


def text_of(result: Any) -> str:
    """The one text of a tool's result."""
    (content,) = result.content
    return str(content.text)


async def read(client: Any, uri: str) -> str:
    """The text of a resource."""
    (content,) = (await client.read_resource(uri)).contents
    return str(content.text)
