"""``provgraph mcp``: the server, started as a process over stdio and driven by the MCP SDK's own client.

One server process per scenario: the first calls every tool on a real folder (a chain, a
missing source, a cycle, an escaped name, a path outside the root) and reads the resources
before and after a source edit; the others hear of a change while subscribed, in each of
the protocol's two ways of subscribing.  The rules it keeps (its block is the command's,
a call never waits unboundedly) are in ``stress/test_mcp_rules.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from extras import needs
from mcp_client import GRAPH, INDEX, NOW, STALE, TIMEOUT, read, serving, text_of

pytestmark = needs("mcp")


@pytest.fixture
def folder(memory: Any) -> Path:
    """A chain facts -> profile -> digest, a file whose source is gone, a cycle, a file with a newline in its name."""
    memory.write("facts.md", "facts v1\n")
    memory.write("profile.md", "profile\n", derived_from="facts.md")
    memory.write("digest.md", "digest\n", derived_from="profile.md")
    memory.write("orphan.md", "orphan\n", derived_from="gone.md")
    memory.write("a.md", "a\n", derived_from="b.md")
    memory.write("b.md", "b\n", derived_from="a.md")
    memory.write("odd\nname.md", "odd\n", derived_from="facts.md")
    return Path(memory.root)


def test_every_tool_answers_a_real_folder_and_the_block_follows_an_edit(folder: Path) -> None:
    async def scenario() -> None:
        async with serving(folder) as client:
            assert sorted(tool.name for tool in (await client.list_tools()).tools) == [
                "explain_memory",
                "list_stale_memories",
                "memory_index_problems",
                "memory_lineage",
                "record_rederivation",
            ]
            for tool in (await client.list_tools()).tools:
                assert tool.input_schema["type"] == "object"
            assert sorted(r.uri for r in (await client.list_resources()).resources) == [GRAPH, INDEX, STALE]
            assert [p.name for p in (await client.list_prompts()).prompts] == ["rederive_stale_memory"]

            before = await read(client, STALE)
            assert "orphan.md" in before and "profile.md" not in before

            (folder / "facts.md").write_text("facts v2\n")
            after = await read(client, STALE)
            assert "- profile.md: source(s) changed since derived (2024-03-01): facts.md changed" in after
            assert "digest.md: source(s) changed since derived (2024-03-01): via profile.md <- facts.md" in after

            listed = text_of(await client.call_tool("list_stale_memories", {}))
            assert listed.startswith("4 derived memory files have changed sources")
            assert "odd\\u000aname.md" in listed and "odd\nname.md" not in listed
            assert listed.index("- profile.md") < listed.index("- digest.md")  # the repair order
            assert "Shown: 1 to 4 of 4; that is all." in listed

            odd = text_of(await client.call_tool("explain_memory", {"path": "odd\\u000aname.md"}))
            assert odd.startswith("odd\\u000aname.md: stale") and "facts.md changed on 2024-03-01" in odd

            why = text_of(await client.call_tool("explain_memory", {"path": "digest.md"}))
            assert "facts.md -> profile.md -> digest.md" in why

            cycle = text_of(await client.call_tool("explain_memory", {"path": "a.md"}))
            assert "In a cycle:" in cycle

            lineage = text_of(await client.call_tool("memory_lineage", {"path": os.fspath(folder / "facts.md")}))
            assert "3 memory files are derived from it, directly or through others; 3 stale:" in lineage
            assert "chain: facts.md -> profile.md -> digest.md" in lineage

            (first,) = (await client.get_prompt("rederive_stale_memory", {})).messages
            assert first.content.text.startswith("The memory file odd\\u000aname.md was derived")  # first to repair
            assert "call `record_rederivation` with path `odd\\u000aname.md`" in first.content.text
            (named,) = (await client.get_prompt("rederive_stale_memory", {"path": "digest.md"})).messages
            assert "facts.md -> profile.md -> digest.md" in named.content.text

            refused = await client.call_tool("record_rederivation", {"path": "orphan.md"})
            assert refused.is_error and "gone.md" in text_of(refused)

            no_index = text_of(await client.call_tool("memory_index_problems", {}))
            assert no_index == f"There is no memory index in {folder}: no MEMORY.md there links a memory file."

            outside = await client.call_tool("explain_memory", {"path": "../elsewhere.md"})
            assert outside.is_error and "is not a path inside the memory folder" in text_of(outside)

            recorded = await client.call_tool("record_rederivation", {"path": "profile.md"})
            assert not recorded.is_error
            assert text_of(recorded) == "Recorded: profile.md is now derived from its source as it is now."
            await client.call_tool("record_rederivation", {"path": "digest.md"})
            cleared = await read(client, STALE)
            assert "profile.md" not in cleared and "digest.md" not in cleared and "orphan.md" in cleared

    anyio.run(scenario)


def _note(name: str, description: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: user\n---\nbody\n"


def test_the_index_problems_are_named_with_their_kind_and_the_printed_index_written_and_recorded_clears_them(
    memory: Any, run: Any
) -> None:
    """A drifted index (an entry to a deleted file, a file not listed, a description edited, a
    line repeated): each problem named with its kind, then the index printed in the answer,
    written over MEMORY.md and recorded with ``record_rederivation``, leaves none."""
    memory.write("MEMORY.md", "- [Facts](facts.md) — where the user lives\n- [Prefs](prefs.md) — how to answer\n")
    memory.write("facts.md", _note("Facts", "where the user lives"))
    memory.write("prefs.md", _note("Prefs", "how to answer"))
    root = Path(memory.root)
    agrees = "The memory index agrees with the files: every entry is current, and it lists every memory file."

    async def scenario() -> None:
        async with serving(root) as client:
            assert text_of(await client.call_tool("memory_index_problems", {})) == agrees  # its entries adopted
            (root / "prefs.md").unlink()
            (root / "team\u200bnotes.md").write_text(_note("Team", "who works with the user"))
            (root / "facts.md").write_text(_note("Facts", "where the user lives and works"))
            with (root / "MEMORY.md").open("a") as index:
                index.write("- [Facts](facts.md) — again\n")
            answer = text_of(await client.call_tool("memory_index_problems", {}))
            problems, printed = answer.split("\nThe index as it should be, from the next line to the end; ")
            assert problems.splitlines() == [
                "4 problems with the memory index, in the order to repair them:",
                "- prefs.md: dangling-entry: MEMORY.md line 2 links it, and it does not exist",
                "- team\\u200bnotes.md: orphan: no line of MEMORY.md links it",
                "- facts.md: outdated-entry: MEMORY.md line 1 predates a change of its name, description or type "
                "(since 2024-03-01)",
                "- facts.md: duplicate-entry: MEMORY.md lists it on lines 1, 3",
                "Shown: 1 to 4 of 4; that is all.",
            ]
            intro, index = printed.split("\n", 1)
            assert intro == "write it over MEMORY.md, then call `record_rederivation` with path `MEMORY.md`:"
            assert index + "\n" == await read(client, INDEX) == run("index", cwd=root, now=NOW)[1]
            (root / "MEMORY.md").write_text(index + "\n")
            recorded = text_of(await client.call_tool("record_rederivation", {"path": "MEMORY.md"}))
            assert recorded.startswith("Recorded: MEMORY.md is now derived from the name, description and type")
            assert text_of(await client.call_tool("memory_index_problems", {})) == agrees
            assert await read(client, STALE) == ""

    anyio.run(scenario)


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")  # the way of every client before 2026-07-28
def test_a_client_subscribed_to_the_block_hears_of_a_source_edit(folder: Path) -> None:
    async def scenario() -> None:
        import mcp_types  # the mcp extra, present only when the test runs

        updated: list[str] = []
        heard = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, mcp_types.ResourceUpdatedNotification):
                updated.append(message.params.uri)
                heard.set()

        async with serving(folder, mode="legacy", message_handler=on_message) as client:
            await client.subscribe_resource(STALE)
            before = await read(client, STALE)
            await anyio.sleep(1.2)  # unchanged, a look or more: nothing to tell
            assert updated == []
            (folder / "facts.md").write_text("facts v2\n")
            with anyio.fail_after(TIMEOUT):
                await heard.wait()
            assert updated == [STALE]
            after = await read(client, STALE)
            assert "profile.md: source(s) changed since derived" in after and after != before

    anyio.run(scenario)


def test_a_listening_client_hears_of_a_source_edit(folder: Path) -> None:
    """The protocol's 2026-07-28 way: a ``subscriptions/listen`` stream filtered by resource."""

    async def scenario() -> None:
        async with serving(folder) as client, client.listen(resource_subscriptions=[GRAPH]) as events:
            await read(client, GRAPH)
            (folder / "profile.md").unlink()
            with anyio.fail_after(TIMEOUT):
                event = await events.__anext__()
            assert event.uri == GRAPH
            graph = await read(client, GRAPH)
            assert '"status": "missing"' in graph

    anyio.run(scenario)


def test_a_client_listening_to_the_index_hears_of_a_file_it_does_not_list(memory: Any) -> None:
    memory.write("MEMORY.md", "- [Facts](facts.md) — where the user lives\n")
    memory.write("facts.md", _note("Facts", "where the user lives"))
    root = Path(memory.root)

    async def scenario() -> None:
        async with serving(root) as client, client.listen(resource_subscriptions=[INDEX, STALE]) as events:
            assert await read(client, STALE) == ""
            (root / "travel.md").write_text(_note("Travel", "trips planned"))
            with anyio.fail_after(TIMEOUT):
                heard = {(await events.__anext__()).uri, (await events.__anext__()).uri}
            assert heard == {INDEX, STALE}
            assert (await read(client, INDEX)).endswith("- [Travel](travel.md) — trips planned\n")
            assert "- travel.md: orphan: no line of MEMORY.md links it" in await read(client, STALE)

    anyio.run(scenario)


def test_config_prints_a_snippet_for_each_client_with_the_absolute_command(folder: Path, run: Any) -> None:
    code, out, err = run("mcp", "--config", ".", "--state", "state", cwd=folder)
    assert (code, err) == (0, "")
    command, snippets = out.split("\n", 2)[1], re.findall(r"^\{$.*?^\}$", out, re.M | re.S)
    assert command.startswith("claude mcp add provgraph -- /") and command.endswith(
        f" mcp {folder} --state {folder}/state"
    )
    assert len(snippets) == 3
    for snippet in map(json.loads, snippets):
        server = snippet["mcpServers"]["provgraph"]
        assert os.path.isabs(server["command"])
        assert server["args"][-4:] == ["mcp", os.fspath(folder), "--state", f"{folder}/state"]


def test_without_the_extra_the_command_says_how_to_install_it_in_one_line(folder: Path) -> None:
    hidden = "import sys; sys.modules['mcp'] = None; from provgraph.cli import main; main()"  # as if not installed
    done = subprocess.run(
        [sys.executable, "-c", hidden, "mcp", os.fspath(folder)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == "provgraph: error: the MCP server needs the MCP SDK, which is not installed: pip install 'provgraph[mcp]'\n"
    )


def test_a_root_that_is_not_a_folder_is_one_line_and_exit_two(folder: Path, run: Any) -> None:
    code, out, err = run("mcp", "missing", cwd=folder)
    assert (code, out) == (2, "") and err == f"provgraph: error: memory root {folder}/missing is not a folder\n"


@needs("inotify_simple")
def test_two_servers_on_one_folder_each_answer_from_their_watch(folder: Path) -> None:
    """Two clients each start a server on the same folder: a call of one (which takes the store's
    lock) is no change for the other, which keeps answering without a walk."""
    from provgraph import Memory
    from provgraph.watch import WatchedRefresh

    time.sleep(2.2)  # past the racy window of the files just written: no scan reads them again
    first, second = (WatchedRefresh(lambda warn: Memory(folder, warn=warn)) for _ in range(2))
    try:
        for watched in (first, second, first, second):
            watched.refresh()
        walks = (first.walks, second.walks)
        for _ in range(5):
            first.refresh()
            second.refresh()
        assert (first.walks, second.walks) == walks
    finally:
        first.close()
        second.close()


@needs("agentscope")
def test_the_benchmark_of_the_server_prints_each_figure_beside_its_floor(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "tests.bench.mcp_server",
        "--files",
        "20",
        "--runs",
        "1",
        "--calls",
        "20",
        "--quick",
    ]
    done = subprocess.run(command, cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()[1:]
    assert [row.split("  ")[1].strip() for row in rows] == [
        "start: handshake done",
        "start: first answer",
        "tool call over stdio, nothing changed",
        "tool call in process, nothing changed",
        "index tool in process, nothing changed",
    ]
    assert all(re.search(r"\d×$", row) for row in rows)


def test_a_long_index_problem_list_is_paged_and_a_long_index_is_pointed_to(memory: Any) -> None:
    from provgraph.integrations.mcp import MemoryServer  # the mcp extra, present only when the test runs

    memory.write("MEMORY.md", "# Memory\n- [Note 0](note00.md) — the first\n")
    for number in range(30):
        memory.write(f"note{number:02}.md", _note(f"Note {number}", "a description long enough to fill a line " * 2))
    server = MemoryServer(memory.root)
    try:
        first = server.call("memory_index_problems", {})
        second = server.call("memory_index_problems", {"offset": 20})
    finally:
        server.close()
    assert first.startswith("29 problems with the memory index, in the order to repair them:\n- note01.md: orphan:")
    assert "Shown: 1 to 20 of 29; call `memory_index_problems` with offset=20 for the next ones." in first
    assert "- note21.md: orphan:" in second and "Shown: 21 to 29 of 29; that is all." in second
    pointer = "The index as it should be has 31 lines: read the resource provgraph://index (or run `provgraph index "
    assert pointer in first and first.endswith("then call `record_rederivation` with path `MEMORY.md`.")
    assert all(len(answer) <= 4000 for answer in (first, second))


def test_the_index_answered_follows_an_edit_of_the_index_that_changes_no_problem(memory: Any) -> None:
    from provgraph.integrations.mcp import INDEX_URI, MemoryServer  # the mcp extra, present only when the test runs

    memory.write("MEMORY.md", "- [Facts](facts.md) — where the user lives\n")
    memory.write("facts.md", _note("Facts", "where the user lives"))
    memory.write("travel.md", _note("Travel", "trips planned"))
    server = MemoryServer(memory.root)
    try:
        assert server.resource_text(INDEX_URI).endswith("- [Travel](travel.md) — trips planned\n")
        before = server.call("memory_index_problems", {})
        memory.write("MEMORY.md", "# What I remember\n- [Facts](facts.md) — where the user lives\n")
        after = server.call("memory_index_problems", {})
        assert "# What I remember\n- [Facts](facts.md)" in after and "# What I remember" not in before
        assert server.resource_text(INDEX_URI).startswith("# What I remember\n")
    finally:
        server.close()


def test_the_server_reads_the_index_files_and_patterns_it_is_given_and_its_commands_repeat_them(memory: Any) -> None:
    from provgraph.integrations.mcp import MemoryServer  # the mcp extra, present only when the test runs

    memory.write("MEMORY.md", "# Memory\nWhat I keep is indexed in notes/INDEX.md.\n")
    memory.write("notes/INDEX.md", "- [Facts](facts.md) — where the user lives\n")
    memory.write("notes/facts.md", _note("Facts", "where the user lives"))
    memory.write("notes/travel.md", _note("Travel", "trips planned"))
    memory.write("notes/scratch.md", _note("Scratch", "not worth listing"))
    server = MemoryServer(memory.root, index_files=["notes/INDEX.md"], unindexed=["notes/scratch.md"])
    try:
        answer = server.call("memory_index_problems", {})
    finally:
        server.close()
    assert "- notes/travel.md: orphan:" in answer and "scratch.md" not in answer.split("The index as it should be")[0]
    assert "write it over notes/INDEX.md, then call `record_rederivation` with path `notes/INDEX.md`" in answer
    assert server.options == ("--index=notes/INDEX.md", "--unindexed=notes/scratch.md")
