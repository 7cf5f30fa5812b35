"""The AgentScope middleware, driven through a real ``Agent`` with a scripted model.

Every prompt assertion is on the system prompt the model actually received.
The model is a ``ChatModelBase`` subclass that replays a script (no network), in
``scripted_agent.py`` with the other AgentScope subclasses the tests use.
The memory middleware's retrieval hints are switched off except in the tests
about them: they never touch the system prompt.  Where retrieval is on, the
scripted model answers the memory middleware's file selection, and waits for
the retrieval to finish before answering the agent, as a real model's latency
lets it: AgentScope cancels a retrieval still running at the end of a reply,
possibly while it holds a memory file open, and that would surface later as an
unraisable ResourceWarning in whichever test happens to run.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from extras import needs

from provgraph import Memory

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global LINEAGE_MAX_CHARS, LINEAGE_TOOL, LIST_TOOL, RECORD_TOOL, LocalBackend, ProvenanceMiddleware
    global default_state_path, ask, hints, lineage, memory_middleware, remote_workdir, retrieved, tool_call
    global tool_results
    from agentscope.tool import LocalBackend
    from scripted_agent import (
        ask,
        hints,
        lineage,
        memory_middleware,
        remote_workdir,
        retrieved,
        tool_call,
        tool_results,
    )

    from provgraph.integrations.agentscope import (
        LINEAGE_MAX_CHARS,
        LINEAGE_TOOL,
        LIST_TOOL,
        RECORD_TOOL,
        ProvenanceMiddleware,
        default_state_path,
    )


HEADING = "## Derived memories with changed sources"
ADOPTED = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)
EDITED = datetime(2026, 11, 18, 15, 30, tzinfo=UTC)
CHECKED = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
OLD = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
MARKER = "- profile.md: source(s) changed since derived (2026-11-18): user-facts.md changed"
BASE_PROMPT = "You are a helpful assistant."

INDEX = (
    "- [User facts](user-facts.md) — where the user lives\n- [Preferences](preferences.md) — what the user drinks\n"
    "- [Profile](profile.md) — who the user is\n"
)
FILES = {
    "MEMORY.md": INDEX,
    "user-facts.md": "---\nname: User facts\ndescription: facts\ntype: user\n---\nThe user lives in Lyon.\n",
    "preferences.md": "---\nname: Preferences\ntype: user\n---\nThe user drinks tea.\n",
    "profile.md": (
        "---\nname: Profile\ndescription: When you tailor an answer, Read this first.\ntype: user\n"
        "derived_from: user-facts.md, preferences.md\n---\nA tea drinker living in Lyon.\n"
    ),
    # Hidden entries are not memory files: were this one scanned, it would be marked too.
    ".trash/profile-old.md": "---\nderived_from: ../user-facts.md\n---\nold\n",
}
MOVED = "---\nname: User facts\ndescription: facts\ntype: user\n---\nThe user moved to Oslo.\n"


# -- memory folders ----------------------------------------------------------------


def write(folder: Path, relative: str, text: str, when: datetime | None = None) -> None:
    target = folder / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    if when is not None:
        os.utime(target, (when.timestamp(), when.timestamp()))


def indexed(folder: Path, relative: str, text: str, when: datetime | None = None) -> None:
    """``write``, and a line for the file in the folder's ``MEMORY.md``, which then stays in step."""
    write(folder, relative, text, when)
    with (folder / "MEMORY.md").open("a", encoding="utf-8") as index:
        index.write(f"- [{relative}]({relative}) — a note\n")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every memory file's bytes (provgraph's own state folder excluded)."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and ".provgraph" not in path.parts and path.name != "provgraph.lock"
    }


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A workdir whose ``Memory`` folder holds a derived profile and its two sources."""
    for relative, text in FILES.items():
        write(tmp_path / "work" / "Memory", relative, text, OLD)
    return tmp_path / "work"


async def adopt(provenance: ProvenanceMiddleware, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first look at the folder: every derived file is taken to match its sources."""
    monkeypatch.setenv("PROVGRAPH_NOW", ADOPTED.isoformat())
    assert await provenance.on_system_prompt(None, "prompt") == "prompt"
    monkeypatch.setenv("PROVGRAPH_NOW", CHECKED.isoformat())


def during_an_outage(prompt: str, why: str = "the memory folder could not be read now") -> str:
    """``prompt``, the last check's (at ``CHECKED``), as a check that failed shows it: its marks kept, dated."""
    return f"{prompt}\n(as of the last check, 2026-11-20 09:00; {why})"


def while_a_check_runs(prompt: str) -> str:
    """``prompt``, the last check's, as a model call shows it while a newer check goes on in the background."""
    return during_an_outage(prompt, "a newer check is still running")


def appended(prompt: str, memory_only: str) -> str:
    """What came after the memory middleware's prompt (which must be intact, first)."""
    assert prompt.startswith(memory_only + "\n\n")
    return prompt[len(memory_only) + 2 :]


# -- the prompt ----------------------------------------------------------------------


def test_fresh_memory_leaves_the_prompt_byte_for_byte(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVGRAPH_NOW", ADOPTED.isoformat())
    memory = memory_middleware(workdir)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)

    alone = asyncio.run(ask([memory]))
    both = asyncio.run(ask([memory, provenance], tools=asyncio.run(provenance.list_tools())))
    monkeypatch.setenv("PROVGRAPH_NOW", CHECKED.isoformat())
    again = asyncio.run(ask([memory, provenance]))

    assert both.system_prompts == alone.system_prompts
    assert again.system_prompts == alone.system_prompts
    assert (workdir / "Memory" / "provgraph.lock").is_file()  # it did look, and adopted the profile


def test_stale_derived_file_is_marked_after_the_snapshot_and_its_truncation(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = workdir / "Memory"
    write(folder, "MEMORY.md", INDEX + "".join(f"- [Item {i}](item-{i}.md) — note {i}\n" for i in range(80)))
    for number in range(80):
        write(folder, f"item-{number}.md", f"note {number}\n", OLD)
    memory = memory_middleware(workdir, memory_max_tokens=120)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)
    before = snapshot(folder)

    prompt = asyncio.run(ask([memory, provenance])).system_prompts[0]
    memory_only = asyncio.run(ask([memory])).system_prompts[0]

    assert "<<<TRUNCATED>>>" in memory_only
    block = appended(prompt, memory_only)
    lines = block.splitlines()
    assert lines[0] == HEADING
    assert MARKER in lines
    assert not any("profile-old" in line for line in lines)
    assert any(RECORD_TOOL in line and LINEAGE_TOOL in line for line in lines)
    assert snapshot(folder) == before


def test_a_stale_file_older_than_the_newest_200_is_still_marked(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = workdir / "Memory"
    for number in range(210):
        write(folder, f"notes/note-{number:03}.md", f"---\ntype: project\n---\nnote {number}\n", EDITED)
    memory = memory_middleware(workdir)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)

    selectable = {header.filename for header in asyncio.run(memory._list_md_files())}
    prompt = asyncio.run(ask([memory, provenance])).system_prompts[0]

    assert len(selectable) == 200
    assert "profile.md" not in selectable
    assert MARKER in prompt.splitlines()


def test_the_line_cap_points_to_the_listing_tool(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = workdir / "Memory"
    for name in ("digest.md", "summary.md"):
        indexed(folder, name, "---\nderived_from: user-facts.md\n---\nsummary\n", OLD)
    provenance = ProvenanceMiddleware(workdir=str(workdir), max_lines=1)
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)

    prompt = asyncio.run(ask([memory_middleware(workdir), provenance])).system_prompts[0]
    listing = asyncio.run(provenance.list_stale_derived_memories())

    assert sum("source(s) changed since derived (2026-11-18)" in line for line in prompt.splitlines()) == 1
    assert f"- … and 2 more stale derived files; call `{LIST_TOOL}` to list them all." in prompt.splitlines()
    assert [line.split(":")[0] for line in listing.splitlines() if "changed since derived" in line] == [
        "- digest.md",
        "- profile.md",
        "- summary.md",
    ]


# -- the tools -------------------------------------------------------------------------


def test_the_agent_records_a_rederivation_and_the_marker_is_gone(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = workdir / "Memory"
    memory = memory_middleware(workdir)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)
    before = snapshot(folder)

    model = asyncio.run(
        ask(
            [memory, provenance],
            tools=asyncio.run(provenance.list_tools()),
            script=[tool_call(RECORD_TOOL, path="profile.md")],
        )
    )
    memory_only = asyncio.run(ask([memory])).system_prompts[0]

    assert RECORD_TOOL in model.tool_names[0]
    assert MARKER in model.system_prompts[0].splitlines()
    assert model.system_prompts[1] == memory_only
    [answer] = tool_results(model, 1)
    assert answer.startswith("Recorded: profile.md")
    assert snapshot(folder) == before


def record(provenance: ProvenanceMiddleware, path: str) -> str:
    [tool] = [tool for tool in asyncio.run(provenance.list_tools()) if tool.name == RECORD_TOOL]
    chunk = asyncio.run(tool.call(path=path))
    [text] = [block.text for block in chunk.content]
    assert 1 <= len(text.splitlines()) <= 2
    return text


def test_the_record_tool_answers_in_words_for_every_path(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = workdir / "Memory"
    indexed(folder, "digest.md", "---\nderived_from: profile.md\n---\ndigest\n", OLD)
    provenance = ProvenanceMiddleware(workdir=str(workdir))
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)

    assert "not a derived memory file" in record(provenance, "user-facts.md")
    assert "not a derived memory file" in record(provenance, "no-such-file.md")
    assert "not a path inside the memory folder" in record(provenance, "../outside.md")
    assert "not a path inside the memory folder" in record(provenance, "/etc/passwd")
    assert "stays marked" in record(provenance, "digest.md")  # its source profile.md is itself stale
    assert record(provenance, str(folder / "profile.md")).startswith("Recorded: profile.md")
    assert asyncio.run(provenance.refresh()).stale == ()


def test_the_record_tool_reports_a_failure_instead_of_raising(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = workdir / "not-a-folder"
    blocker.write_text("a file where the state folder should be")
    provenance = ProvenanceMiddleware(workdir=str(workdir), state=blocker / "state.json")

    assert record(provenance, "profile.md").startswith("Could not record the re-derivation of profile.md")
    assert asyncio.run(provenance.on_system_prompt(None, "prompt")) == "prompt"


# -- the lineage tool ------------------------------------------------------------------------


def stale_line(path: str, chain: str) -> str:
    return f"- {path}: stale, source(s) changed since derived (2026-11-18); chain: {chain}"


@pytest.fixture
def family(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> ProvenanceMiddleware:
    """user-facts, preferences -> profile -> digest;  preferences -> drinks;  user-facts edited after adoption.

    Other files use it too, so it imports the middleware itself."""
    from provgraph.integrations.agentscope import ProvenanceMiddleware

    folder = workdir / "Memory"
    indexed(folder, "digest.md", "---\nderived_from: profile.md\n---\ndigest\n", OLD)
    indexed(folder, "drinks.md", "---\nderived_from: preferences.md\n---\ntea, no sugar\n", OLD)
    provenance = ProvenanceMiddleware(workdir=str(workdir))
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)
    return provenance


def test_lineage_of_a_source_lists_its_stale_descendants_with_chains(
    family: ProvenanceMiddleware, workdir: Path
) -> None:
    before = snapshot(workdir / "Memory")

    facts = lineage(family, "user-facts.md").splitlines()
    preferences = lineage(family, "preferences.md").splitlines()

    assert facts[0] == "user-facts.md: a source; it is not derived from other memory files"
    assert [line for line in facts if line.startswith("- ")] == [
        stale_line("profile.md", "user-facts.md -> profile.md"),
        stale_line("digest.md", "user-facts.md -> profile.md -> digest.md"),
    ]
    assert any(RECORD_TOOL in line for line in facts[1:])
    # Stale first, whatever made them stale; then the fresh ones.
    assert [line for line in preferences if line.startswith("- ")] == [
        stale_line("profile.md", "preferences.md -> profile.md"),
        stale_line("digest.md", "preferences.md -> profile.md -> digest.md"),
        "- drinks.md: fresh; chain: preferences.md -> drinks.md",
    ]
    assert snapshot(workdir / "Memory") == before


def test_lineage_of_a_derived_file_gives_its_status_and_sources(family: ProvenanceMiddleware, workdir: Path) -> None:
    profile = lineage(family, str(workdir / "Memory" / "profile.md")).splitlines()
    drinks = lineage(family, "drinks.md").splitlines()

    assert profile[0] == "profile.md: stale: source(s) changed since derived (2026-11-18): user-facts.md changed"
    assert profile[1] == "Sources: preferences.md (unchanged), user-facts.md (changed since 2026-11-18)"
    assert stale_line("digest.md", "profile.md -> digest.md") in profile
    assert lineage(family, "digest.md").splitlines()[1] == "Sources: profile.md (unchanged, itself stale)"
    assert drinks[0] == "drinks.md: fresh: every source holds what it was derived from"
    assert "No memory file is derived from it." in drinks
    assert not any(RECORD_TOOL in line for line in drinks)  # nothing to re-derive


def test_lineage_names_the_cycle_a_file_is_in(workdir: Path) -> None:
    folder = workdir / "Memory"
    write(folder, "draft.md", "---\nderived_from: outline.md\n---\ndraft\n")
    write(folder, "outline.md", "---\nderived_from: draft.md\n---\noutline\n")

    answer = lineage(ProvenanceMiddleware(workdir=str(workdir)), "draft.md").splitlines()

    assert "In a cycle (files derived from each other): draft.md -> outline.md -> draft.md" in answer


def test_lineage_answers_in_one_line_for_a_path_it_does_not_know(family: ProvenanceMiddleware, workdir: Path) -> None:
    blocker = workdir / "not-a-folder"
    blocker.write_text("a file where the state folder should be")
    broken = ProvenanceMiddleware(workdir=str(workdir), state=blocker / "state.json")
    answers = {
        path: lineage(family, path)
        for path in ("no-such-file.md", "MEMORY.md", ".trash/profile-old.md", "../outside.md", "/etc/passwd")
    }

    assert all(len(answer.splitlines()) == 1 for answer in answers.values())
    assert "does not exist" in answers["no-such-file.md"]
    assert "takes no part in any derivation" in answers["MEMORY.md"]
    assert "takes no part in any derivation" in answers[".trash/profile-old.md"]  # hidden: not a memory file
    assert "not a path inside the memory folder" in answers["../outside.md"]
    assert "not a path inside the memory folder" in answers["/etc/passwd"]
    assert lineage(broken, "profile.md").startswith("Could not check the lineage of profile.md: ")


def sixty_one_stale_descendants(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """30 notes and 30 files with 200-character names derived from user-facts.md, which
    then changes (61 stale descendants with profile.md); a middleware listing at most 5
    files and one with the default bound.  Other files use it too, so it imports the middleware itself."""
    from provgraph.integrations.agentscope import ProvenanceMiddleware

    folder = workdir / "Memory"
    derived = "---\nderived_from: ../user-facts.md\n---\nsummary\n"
    for number in range(30):
        write(folder, f"notes/note-{number:02}.md", derived, OLD)
        write(folder, f"long/{'n' * 200}-{number:02}<b>.md", derived, OLD)
    few = ProvenanceMiddleware(workdir=str(workdir), max_lines=5)
    many = ProvenanceMiddleware(workdir=str(workdir))
    asyncio.run(adopt(few, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)
    return few, many


def test_lineage_answer_is_bounded_in_lines_and_characters(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    few, many = sixty_one_stale_descendants(workdir, monkeypatch)

    short = lineage(few, "user-facts.md").splitlines()
    long = lineage(many, "user-facts.md")
    listed = [line for line in long.splitlines() if "source(s) changed since derived" in line]

    # 30 notes, 30 long names and profile.md: 61 stale descendants.
    assert sum(line.startswith("- ") and "stale" in line for line in short) == 5 + 1
    assert f"- … and 56 more derived files (56 stale); call `{LIST_TOOL}` to list every stale file." in short
    assert len(long) <= LINEAGE_MAX_CHARS
    assert 0 < len(listed) < many.max_lines  # the characters ran out before the line cap
    assert f"- … and {61 - len(listed)} more derived files ({61 - len(listed)} stale)" in long
    assert "<b>" not in long and "\\u003cb\\u003e" in long


def test_the_agent_asks_the_lineage_through_its_toolkit(family: ProvenanceMiddleware) -> None:
    model = asyncio.run(
        ask([family], tools=asyncio.run(family.list_tools()), script=[tool_call(LINEAGE_TOOL, path="profile.md")])
    )

    assert LINEAGE_TOOL in model.tool_names[0]
    [answer] = tool_results(model, 1)
    assert answer == lineage(family, "profile.md")
    assert answer.startswith("profile.md: stale: source(s) changed since derived (2026-11-18)")


def test_the_folder_is_checked_once_per_model_call(
    family: ProvenanceMiddleware, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = []
    refresh = Memory.refresh

    def counted(memory: Memory, **options: object) -> object:
        checks.append(memory.root)
        return refresh(memory, **options)

    monkeypatch.setattr(Memory, "refresh", counted)
    model = asyncio.run(
        ask([family], tools=asyncio.run(family.list_tools()), script=[tool_call(LINEAGE_TOOL, path="profile.md")])
    )

    assert len(model.system_prompts) == 2
    assert MARKER in model.system_prompts[0].splitlines()
    assert len(checks) == 2 + 1  # once per model call, and once for the tool


# -- retrieved memory files ------------------------------------------------------------------


def without_age(hint: str) -> str:
    """A retrieval hint without the file ages, which follow the real clock."""
    return re.sub(r"Memory \(saved [^)]*\)", "Memory", hint)


def test_a_retrieved_stale_file_is_marked_in_its_hint(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = workdir / "Memory"
    memory = memory_middleware(workdir, retrieval_async=True)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)
    tools = asyncio.run(provenance.list_tools())
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)
    before = snapshot(folder)

    model = retrieved([memory, provenance], tools, selected=["preferences.md", "profile.md"])
    alone = retrieved([memory], tools, selected=["preferences.md", "profile.md"])

    assert model.retrievals == 1
    [hint] = hints(model, 1)
    [plain] = hints(alone, 1)
    # Whether the retrieval finished before the first model call or during it, the
    # model never read the hint without its note.
    assert hints(model, 0) in ([], [hint])
    assert f"{folder / 'profile.md'}:\n\n{FILES['profile.md']}" in plain  # the file is shown whole
    note = "Note: profile.md: source(s) changed since derived (2026-11-18): user-facts.md changed"
    assert without_age(hint) == without_age(plain) + "\n\n" + note
    assert MARKER in model.system_prompts[1].splitlines()
    assert stale_line("profile.md", "user-facts.md -> profile.md") in tool_results(model, 1)[0].splitlines()
    assert snapshot(folder) == before


def test_a_retrieved_fresh_file_is_not_marked(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = memory_middleware(workdir, retrieval_async=True)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)
    tools = asyncio.run(provenance.list_tools())
    asyncio.run(adopt(provenance, monkeypatch))

    model = retrieved([memory, provenance], tools, selected=["profile.md"])
    alone = retrieved([memory], tools, selected=["profile.md"])

    [hint] = hints(model, 1)
    [plain] = hints(alone, 1)
    assert f"{workdir / 'Memory' / 'profile.md'}:" in hint
    assert without_age(hint) == without_age(plain)


def test_a_retrieved_stale_file_is_marked_through_a_remote_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = remote_workdir("relative")
    memory = memory_middleware("/sandbox/work", backend, retrieval_async=True)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory, state=tmp_path / "state.json")
    asyncio.run(adopt(provenance, monkeypatch))
    backend.put("/sandbox/work/Memory/user-facts.md", MOVED, EDITED)

    model = retrieved([memory, provenance], asyncio.run(provenance.list_tools()), selected=["profile.md"])

    [hint] = hints(model, 1)
    assert hint.startswith("Memory (saved ")
    assert "/sandbox/work/Memory/profile.md:" in hint.splitlines()[0]
    assert hint.endswith("\n\nNote: profile.md: source(s) changed since derived (2026-11-18): user-facts.md changed")


# -- a remote backend ----------------------------------------------------------------------


@pytest.mark.parametrize("listing", ["absolute", "relative", "with-folders"])
def test_a_remote_backend_gives_the_local_result(
    listing: str, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_memory = memory_middleware(workdir)
    local = ProvenanceMiddleware.from_memory_middleware(local_memory)
    backend = remote_workdir(listing)
    remote_memory = memory_middleware("/sandbox/work", backend)
    remote = ProvenanceMiddleware.from_memory_middleware(remote_memory, state=tmp_path / "remote-state.json")
    asyncio.run(adopt(local, monkeypatch))
    asyncio.run(adopt(remote, monkeypatch))
    write(workdir / "Memory", "user-facts.md", MOVED, EDITED)
    backend.put("/sandbox/work/Memory/user-facts.md", MOVED, EDITED)
    before = dict(backend.files)

    local_block = appended(
        asyncio.run(ask([local_memory, local])).system_prompts[0], asyncio.run(ask([local_memory])).system_prompts[0]
    )
    remote_model = asyncio.run(
        ask(
            [remote_memory, remote],
            tools=asyncio.run(remote.list_tools()),
            script=[tool_call(RECORD_TOOL, path="profile.md")],
        )
    )
    remote_only = asyncio.run(ask([remote_memory])).system_prompts[0]

    assert MARKER in local_block.splitlines()
    assert appended(remote_model.system_prompts[0], remote_only) == local_block
    assert remote_model.system_prompts[1] == remote_only
    lock = "/sandbox/work/Memory/provgraph.lock"
    assert {path: file for path, file in backend.files.items() if path != lock} == {
        path: file for path, file in before.items() if path != lock
    }  # no memory file written: only the lineage lock, in the workspace
    assert backend.files[lock][0] == (tmp_path / "remote-state.json" / "provgraph.lock").read_bytes()


def test_a_remote_failure_keeps_the_prompt_and_the_stamps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = remote_workdir()
    remote = ProvenanceMiddleware(workdir="/sandbox/work", backend=backend, state=tmp_path / "state.json")
    asyncio.run(adopt(remote, monkeypatch))
    backend.put("/sandbox/work/Memory/user-facts.md", MOVED, EDITED)

    backend.failing = True
    during = asyncio.run(remote.on_system_prompt(None, "prompt"))
    backend.failing = False
    after = asyncio.run(remote.on_system_prompt(None, "prompt"))

    assert during == "prompt"
    assert MARKER in after.splitlines()


def test_known_marks_stay_during_a_backend_outage_dated_as_of_the_last_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = remote_workdir()
    remote = ProvenanceMiddleware(workdir="/sandbox/work", backend=backend, state=tmp_path / "state.json")
    asyncio.run(adopt(remote, monkeypatch))
    backend.put("/sandbox/work/Memory/user-facts.md", MOVED, EDITED)
    before = asyncio.run(remote.on_system_prompt(None, "prompt"))

    backend.failing = True
    monkeypatch.setenv("PROVGRAPH_NOW", "2026-11-21T10:00:00+00:00")
    during = asyncio.run(remote.on_system_prompt(None, "prompt"))
    never_checked = ProvenanceMiddleware(workdir="/sandbox/work", backend=backend, state=tmp_path / "other")

    assert MARKER in before.splitlines()
    assert during == during_an_outage(before)
    assert during.splitlines()[-1] == (
        "(as of the last check, 2026-11-20 09:00; the memory folder could not be read now)"
    )
    assert asyncio.run(never_checked.on_system_prompt(None, "prompt")) == "prompt"  # nothing known: nothing added


def test_remote_state_defaults_to_the_cache_folder_keyed_by_the_memory_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    backend = remote_workdir()
    backend.put("/sandbox/other/Memory/MEMORY.md", "", OLD)
    first = ProvenanceMiddleware(workdir="/sandbox/work", backend=backend)
    second = ProvenanceMiddleware(workdir="/sandbox/other", backend=backend)

    asyncio.run(first.refresh())

    assert first.state_path == default_state_path(backend, "/sandbox/work/Memory")
    assert first.state_path.is_relative_to(tmp_path / "cache")
    assert (first.state_path / "provgraph.lock").is_file()
    assert second.state_path != first.state_path


def test_the_local_backend_is_read_in_place(workdir: Path) -> None:
    memory = memory_middleware(workdir)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory, max_lines=5)

    assert isinstance(memory._backend, LocalBackend)
    assert provenance.files is None
    assert provenance.memory_path == str(workdir / "Memory")
    assert provenance.max_lines == 5


def test_importing_provgraph_does_not_import_agentscope() -> None:
    code = (
        "import sys, provgraph, provgraph.api, provgraph.cli, provgraph.render, provgraph.integrations.claude_code\n"
        "assert not [name for name in sys.modules if name.split('.')[0] == 'agentscope'], 'agentscope imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the memory index ------------------------------------------------------------------------


def test_the_block_names_the_index_tool_which_prints_the_index_as_it_should_be(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from provgraph.integrations.agentscope import INDEX_TOOL

    folder = workdir / "Memory"
    provenance = ProvenanceMiddleware(workdir=str(workdir))
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "travel.md", "---\nname: Travel\ndescription: trips planned\n---\nRome\n", EDITED)
    before = snapshot(folder)

    block = asyncio.run(provenance.on_system_prompt(None, "prompt"))
    [tool] = [tool for tool in asyncio.run(provenance.list_tools()) if tool.name == INDEX_TOOL]
    [printed] = [chunk.text for chunk in asyncio.run(tool.call()).content]

    assert "- travel.md: orphan: no line of MEMORY.md links it" in block.splitlines()
    assert f"call `{INDEX_TOOL}`" in block
    assert printed == INDEX + "- [Travel](travel.md) — trips planned\n"
    assert snapshot(folder) == before
