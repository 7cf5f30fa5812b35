"""The MCP server keeps the rules of the other entry points: the agent's block is the
command's, byte for byte, and a call never waits unboundedly for the store's lock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import anyio
from extras import needs
from mcp_client import NOW, STALE, read, serving, text_of

pytestmark = needs("mcp")


def _folder(root: Path) -> Path:
    (root / "facts.md").write_text("facts v1\n")
    (root / "profile.md").write_text("---\nderived_from: facts.md\n---\nprofile\n")
    (root / "orphan.md").write_text("---\nderived_from: gone.md\n---\norphan\n")
    (root / "odd\nname.md").write_text("---\nderived_from: facts.md\n---\nodd\n")
    return root


def test_the_mcp_block_is_byte_for_byte_what_provgraph_prompt_prints(root: Path, run: Any) -> None:
    _folder(root)

    def prompt_command() -> str:
        code, out, _ = run("prompt", os.fspath(root), "--max-lines", "1", cwd=root, now=NOW)
        assert code == 0
        return str(out)

    async def scenario() -> None:
        async with serving(root, "--max-lines", "1") as client:
            assert await read(client, STALE) == prompt_command() != ""
            (root / "facts.md").write_text("facts v2\n")
            edited = await read(client, STALE)
            assert edited == prompt_command() and "and 2 more stale derived files" in edited
            await client.call_tool("record_rederivation", {"path": "profile.md"})
            assert await read(client, STALE) == prompt_command()

    anyio.run(scenario)


def test_an_mcp_call_while_another_process_holds_the_lock_answers_busy_try_again(root: Path) -> None:
    """The server shares the store's lock with the hooks and commands, and waits for it only as long as they do."""

    async def scenario() -> None:
        async with serving(_folder(root), lock_wait=0.5) as client:
            await read(client, STALE)  # the state folder exists
            descriptor = os.open(root / ".provgraph" / "flock", os.O_RDWR)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
                listed = await client.call_tool("list_stale_memories", {})
                assert not listed.is_error and "orphan.md" in text_of(listed)  # answered, not saved
                busy = await client.call_tool("record_rederivation", {"path": "profile.md"})
                assert busy.is_error and text_of(busy).endswith("try again")
            finally:
                os.close(descriptor)
            done = await client.call_tool("record_rederivation", {"path": "profile.md"})
            assert not done.is_error

    anyio.run(scenario)
