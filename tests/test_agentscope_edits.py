"""The AgentScope middleware at the moment of a memory write (``on_acting``).

A real ``Agent`` with AgentScope's own ``Read``, ``Write`` and ``Edit`` tools
and a scripted model (``ScriptedModel`` of ``scripted_agent``): every assertion is on
the tool results the model received in its next call.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from extras import needs
from test_agentscope import EDITED, FILES, MOVED, OLD, adopt, snapshot, write

if TYPE_CHECKING:
    from scripted_agent import ScriptedModel

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global LINEAGE_TOOL, RECORD_TOOL, ProvenanceMiddleware, memory_middleware, remote_workdir, reply, tool_results
    from scripted_agent import memory_middleware, remote_workdir, reply, tool_results

    from provgraph.integrations.agentscope import LINEAGE_TOOL, RECORD_TOOL, ProvenanceMiddleware


HEADING = "Memory lineage after this write (provgraph):"
PAGE = (Path(__file__).resolve().parent.parent / "docs" / "agentscope.md").read_text(encoding="utf-8")
SUMMARY = "---\nname: Summary\ntype: user\n---\nA tea drinker in Lyon.\n"


def results(model: ScriptedModel) -> list[str]:
    """Every tool result text of the reply, in order (as the last model call received them)."""
    return tool_results(model, len(model.inputs) - 1)


def read(folder: Path, name: str) -> tuple[str, dict[str, str]]:
    return ("Read", {"file_path": str(folder / name)})


def written(folder: Path, name: str, content: str) -> tuple[str, dict[str, str]]:
    return ("Write", {"file_path": str(folder / name), "content": content})


def edited(folder: Path, name: str, old: str, new: str) -> list[tuple[str, dict[str, str]]]:
    """A Read, then the Edit (AgentScope's Edit refuses a file not read first)."""
    return [read(folder, name), ("Edit", {"file_path": str(folder / name), "old_string": old, "new_string": new})]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    for relative, text in FILES.items():
        write(tmp_path / "work" / "Memory", relative, text, OLD)
    return tmp_path / "work"


@pytest.fixture
def provenance(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> ProvenanceMiddleware:
    """The middleware on the workdir, after its first look (profile.md adopted)."""
    middleware = ProvenanceMiddleware(workdir=str(workdir))
    asyncio.run(adopt(middleware, monkeypatch))
    return middleware


def test_editing_a_source_ends_its_result_with_what_rests_on_the_old_content(
    workdir: Path, provenance: ProvenanceMiddleware
) -> None:
    folder = workdir / "Memory"
    write(folder, "digest.md", "---\nderived_from: profile.md\n---\nDigest.\n", OLD)
    model = asyncio.run(reply([provenance], edited(folder, "user-facts.md", "Lyon", "Oslo")))
    [_, result, notes] = results(model)
    assert result.startswith("Successfully replaced 1 occurrence")
    shown = re.search(r"\*\*what the edit left behind\*\*.*?```\n(.*?)```", PAGE, re.S)
    assert shown is not None and [line.strip() for line in shown.group(1).splitlines() if line.strip()] == [
        line.strip() for line in notes.splitlines()
    ]
    assert notes.splitlines() == [
        HEADING,
        "- 2 memory files derived from user-facts.md now rest on its old content:",
        "  - profile.md",
        "  - digest.md, via user-facts.md -> profile.md -> digest.md",
        f"  Update each from its sources; if one still holds as it is, call `{RECORD_TOOL}` with its path.",
    ]
    assert (folder / "profile.md").read_text() == FILES["profile.md"]


def test_a_derived_file_is_adopted_when_written_so_a_later_edit_of_its_source_is_reported(
    workdir: Path, provenance: ProvenanceMiddleware
) -> None:
    folder = workdir / "Memory"
    digest = "---\nderived_from: user-facts.md\n---\nThe user lives in Lyon.\n"
    model = asyncio.run(
        reply([provenance], [written(folder, "digest.md", digest), *edited(folder, "user-facts.md", "Lyon", "Oslo")])
    )
    notes = results(model)[-1]
    assert notes.startswith(HEADING)
    assert "  - digest.md" in notes.splitlines()
    assert "digest.md" in {entry.path for entry in asyncio.run(provenance.refresh()).stale}


def test_lineage_is_suggested_only_for_a_file_written_whole_from_what_was_read_since_the_last_write(
    workdir: Path, provenance: ProvenanceMiddleware
) -> None:
    """Adding a fact to a file after reading another is no derivation; a new digest after two reads is."""
    folder = workdir / "Memory"
    write(folder, "log.md", "---\nname: Log\ntype: project\n---\nMet on Monday.\n", OLD)
    calls = [
        read(folder, "user-facts.md"),
        *edited(folder, "log.md", "Monday", "Monday and Friday"),
        read(folder, "preferences.md"),
        read(folder, "profile.md"),
        written(folder, "summary.md", SUMMARY),
    ]
    model = asyncio.run(reply([provenance], calls))
    after_edit, after_write = results(model)[2], results(model)[-1]
    assert HEADING not in after_edit
    assert "  derived_from: preferences.md, profile.md" in after_write.splitlines()
    assert "user-facts.md" not in after_write and "log.md" not in after_write


def test_a_file_written_after_reading_memories_gets_the_line_to_declare_them(
    workdir: Path, provenance: ProvenanceMiddleware
) -> None:
    folder = workdir / "Memory"
    calls = [read(folder, "user-facts.md"), read(folder, "preferences.md"), written(folder, "summary.md", SUMMARY)]
    model = asyncio.run(reply([provenance], calls))
    notes = results(model)[-1]
    assert notes.startswith(HEADING)
    assert "  derived_from: preferences.md, user-facts.md" in notes.splitlines()
    assert (folder / "summary.md").read_text() == SUMMARY  # suggested, never written


def test_memory_files_shown_by_retrieval_count_as_read(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = workdir / "Memory"
    memory = memory_middleware(workdir, retrieval_async=True)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)
    asyncio.run(adopt(provenance, monkeypatch))
    tools = asyncio.run(provenance.list_tools())
    calls = [(LINEAGE_TOOL, {"path": "user-facts.md"}), written(folder, "summary.md", SUMMARY)]
    model = asyncio.run(reply([memory, provenance], calls, tools, selected=["user-facts.md"]))
    assert "  derived_from: user-facts.md" in results(model)[-1].splitlines()


def test_rewriting_a_stale_file_after_reading_its_changed_source_names_the_record_call(
    workdir: Path, provenance: ProvenanceMiddleware
) -> None:
    folder = workdir / "Memory"
    write(folder, "user-facts.md", MOVED, EDITED)
    rewritten = FILES["profile.md"].replace("living in Lyon", "living in Oslo")
    model = asyncio.run(
        reply(
            [provenance],
            [read(folder, "user-facts.md"), read(folder, "profile.md"), written(folder, "profile.md", rewritten)],
        )
    )
    notes = results(model)[-1]
    assert (
        "- You rewrote profile.md after reading what changed in its sources (user-facts.md). "
        f"If it now reflects them, call `{RECORD_TOOL}` with `profile.md` to record the re-derivation; "
        "until then it stays marked."
    ) in notes.splitlines()
    assert [entry.path for entry in asyncio.run(provenance.refresh()).stale] == ["profile.md"]  # not recorded


def test_a_reply_that_touches_no_memory_lineage_sees_byte_identical_tool_results(
    workdir: Path, provenance: ProvenanceMiddleware
) -> None:
    folder = workdir / "Memory"
    pristine = workdir.parent / "pristine"
    shutil.copytree(folder, pristine)
    calls = [
        written(folder, "notes/todo.md", "---\nname: Todo\ntype: project\n---\nBuy tea.\n"),  # beside no index
        *edited(folder, "notes/todo.md", "Buy tea.", "Buy green tea."),
        *edited(folder, "MEMORY.md", "who the user is", "who the user is, in short"),
        read(folder, "user-facts.md"),
        written(workdir, "draft.md", "not a memory file\n"),
        written(folder, ".trash/old.md", "hidden\n"),
    ]
    without = asyncio.run(reply([], calls))
    shutil.rmtree(folder)
    (workdir / "draft.md").unlink()
    shutil.copytree(pristine, folder)
    with_provenance = asyncio.run(reply([provenance], calls))
    assert len(results(without)) == len(calls)
    assert results(with_provenance) == results(without)
    assert snapshot(folder) == snapshot(pristine) | {
        "notes/todo.md": b"---\nname: Todo\ntype: project\n---\nBuy green tea.\n",
        "MEMORY.md": FILES["MEMORY.md"].replace("who the user is", "who the user is, in short").encode(),
        ".trash/old.md": b"hidden\n",
    }


def test_a_write_through_a_remote_backend_gets_the_same_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = remote_workdir()
    memory = memory_middleware("/sandbox/work", backend)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory, state=tmp_path / "state.json")
    asyncio.run(adopt(provenance, monkeypatch))
    folder = Path("/sandbox/work/Memory")
    model = asyncio.run(reply([memory, provenance], edited(folder, "user-facts.md", "Lyon", "Oslo"), backend=backend))
    notes = results(model)[-1]
    assert notes.startswith(HEADING)
    assert "  - profile.md" in notes.splitlines()
    assert (
        backend.files["/sandbox/work/Memory/user-facts.md"][0]
        == MOVED.replace("moved to Oslo", "lives in Oslo").encode()
    )


def test_an_entry_added_by_a_write_is_adopted_then_and_the_files_own_edit_never_restamps(
    workdir: Path, provenance: ProvenanceMiddleware
) -> None:
    folder = workdir / "Memory"
    extended = FILES["profile.md"].replace("derived_from: user-facts.md", "derived_from: user-facts.md, preferences.md")
    assert extended != FILES["profile.md"]
    calls = [
        read(folder, "profile.md"),
        written(folder, "profile.md", extended),
        *edited(folder, "preferences.md", "tea", "coffee"),
        read(folder, "profile.md"),
        written(folder, "profile.md", extended.replace("living in", "who lives in")),
    ]
    model = asyncio.run(reply([provenance], calls))
    after_edit, after_rewrite = results(model)[4], results(model)[-1]
    assert "- 1 memory file derived from preferences.md now rests on its old content:" in after_edit.splitlines()
    assert "- You rewrote profile.md after reading what changed in its sources (preferences.md)." in after_rewrite
    assert [entry.path for entry in asyncio.run(provenance.refresh()).stale] == ["profile.md"]


def test_a_failed_check_leaves_the_writes_result_untouched(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = workdir / "Memory"
    blocker = workdir / "not-a-folder"
    blocker.write_text("a file where the state folder should be")
    broken = ProvenanceMiddleware(workdir=str(workdir), state=blocker / "state.json")
    calls = [read(folder, "user-facts.md"), written(folder, "summary.md", SUMMARY)]
    with_broken = results(asyncio.run(reply([broken], calls)))
    (folder / "summary.md").unlink()
    without = results(asyncio.run(reply([], calls)))
    assert with_broken == without and not any(HEADING in text for text in with_broken)


def test_the_readme_agent_example_runs_as_written(workdir: Path) -> None:
    """The README's permission mode lets the memory ``Write``/``Edit`` run, so their notes appear."""
    from agentscope.message import UserMsg
    from scripted_agent import ScriptedModel, tool_call

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    [block] = [code for code in re.findall(r"```python\n(.*?)```", readme, re.S) if "async def build_agent" in code]
    namespace: dict = {}
    exec(compile(block.replace("/srv/agent", str(workdir)), "README.md", "exec"), namespace)  # noqa: S102
    folder, digest = workdir / "Memory", "---\nderived_from: user-facts.md\n---\nThe user lives in Lyon.\n"
    calls = [written(folder, "digest.md", digest), *edited(folder, "user-facts.md", "Lyon", "Oslo")]
    model = ScriptedModel([tool_call(name, **arguments) for name, arguments in calls])

    async def run() -> None:
        agent = await namespace["build_agent"](model)
        await agent.reply(UserMsg(name="user", content="Keep my memory up to date."))

    asyncio.run(run())
    notes = results(model)[-1]
    assert notes.startswith(HEADING) and "  - digest.md" in notes.splitlines()
    assert "Oslo" in (folder / "user-facts.md").read_text()
