"""The agent can act on everything the AgentScope middleware tells it.

Names come back to the tools as they were shown (escaped or not), every tool
answer has a size bound, the re-derivation answer says what to do about a
source that does not exist, and a retrieved file's note does not depend on
the characters of its name.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from extras import needs
from test_agentscope import EDITED, MOVED, OLD, adopt, write

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global ask, hints, LINEAGE_MAX_CHARS, LINEAGE_TOOL, LIST_TOOL, memory_middleware, ProvenanceMiddleware
    global retrieved, ScriptedReMe, tool_call
    from scripted_agent import ScriptedReMe, ask, hints, memory_middleware, retrieved, tool_call

    from provgraph.integrations.agentscope import LINEAGE_MAX_CHARS, LINEAGE_TOOL, LIST_TOOL, ProvenanceMiddleware


SOURCE = "---\nname: User facts\ntype: user\n---\nThe user lives in Lyon.\n"
ODD_NAMES = ("a<b>.md", "back\\slash.md", "rtl\u202eoverride.md", "new\nline.md", "tab\there.md", "plain.md")
LISTED = re.compile(r"^- (?P<name>.+?): source\(s\) changed since derived")


def derived(sources: str) -> str:
    return f"---\nname: derived\nderived_from: {sources}\n---\nwritten from {sources}\n"


def stale_folder(folder: Path, names: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> ProvenanceMiddleware:
    """``user-facts.md`` and a file derived from it under each name; the source then changes."""
    write(folder, "user-facts.md", SOURCE, OLD)
    for name in names:
        write(folder, name, derived("/user-facts.md"), OLD)
    provenance = ProvenanceMiddleware(workdir=str(folder.parent))
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)
    return provenance


def shown_names(text: str) -> list[str]:
    return [match["name"] for match in map(LISTED.match, text.splitlines()) if match]


def test_every_name_shown_is_accepted_back_by_the_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provenance = stale_folder(tmp_path / "Memory", ODD_NAMES, monkeypatch)
    block = asyncio.run(provenance.on_system_prompt(None, "prompt"))
    names = shown_names(block)

    lineages = [asyncio.run(provenance.memory_lineage(name)) for name in names]
    answers = [asyncio.run(provenance.record_memory_rederivation(name)) for name in names]

    assert len(names) == len(ODD_NAMES)
    assert "back\\\\slash.md" in names and "a\\u003cb\\u003e.md" in names  # shown escaped
    assert all(": stale: " in lineage.splitlines()[0] for lineage in lineages)
    assert all(answer.startswith("Recorded: ") for answer in answers), answers
    assert asyncio.run(provenance.on_system_prompt(None, "prompt")) == "prompt"


def test_a_name_given_unescaped_or_in_full_is_accepted_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "Memory"
    provenance = stale_folder(folder, ("back\\slash.md", "a<b>.md"), monkeypatch)

    assert asyncio.run(provenance.record_memory_rederivation("back\\slash.md")).startswith("Recorded: ")
    assert asyncio.run(provenance.record_memory_rederivation(str(folder / "a<b>.md"))).startswith("Recorded: ")
    assert asyncio.run(provenance.on_system_prompt(None, "prompt")) == "prompt"


def test_the_list_tool_pages_through_every_stale_file_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = tuple(f"notes/{'long-name-' * 15}{number:04}.md" for number in range(400))
    provenance = stale_folder(tmp_path / "Memory", names, monkeypatch)

    pages, offset = [], 0
    while offset is not None and len(pages) < 500:
        page = asyncio.run(provenance.list_stale_derived_memories(offset=offset))
        pages.append(page)
        found = re.search(rf"call `{LIST_TOOL}` with offset=(\d+) for the next ones", page)
        offset = int(found[1]) if found else None

    listed = [name for page in pages for name in shown_names(page)]
    assert listed == sorted(names)
    assert all(len(page) <= LINEAGE_MAX_CHARS for page in pages)
    assert pages[0].startswith("400 derived memory files have changed sources")
    assert pages[-1].splitlines()[-2].endswith("of 400; that is all.")


def test_tool_answers_never_echo_a_huge_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provenance = stale_folder(tmp_path / "Memory", ("plain.md",), monkeypatch)
    huge = "x" * 100_000

    answers = [
        asyncio.run(provenance.memory_lineage(huge)),
        asyncio.run(provenance.memory_lineage("/elsewhere/" + huge)),
        asyncio.run(provenance.record_memory_rederivation(huge)),
        asyncio.run(provenance.record_memory_rederivation("/elsewhere/" + huge)),
    ]

    assert all(len(answer) <= 1000 for answer in answers), [len(answer) for answer in answers]
    assert "is not a path inside the memory folder" in answers[1]


def test_a_missing_source_answer_says_what_the_agent_can_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "Memory"
    provenance = stale_folder(folder, ("profile.md",), monkeypatch)
    write(folder, "user-facts.md", SOURCE, OLD)
    asyncio.run(provenance.record_memory_rederivation("profile.md"))
    (folder / "facts").mkdir()
    (folder / "user-facts.md").rename(folder / "facts" / "user-facts.md")
    write(folder, "digest.md", derived("profile.md, typo.md"), OLD)

    answers = [asyncio.run(provenance.record_memory_rederivation(name)) for name in ("profile.md", "digest.md")]

    assert answers[0].startswith("Nothing recorded for profile.md: it names sources that do not exist: ")
    assert "user-facts.md (its stamped content is now at facts/user-facts.md: fix the entry to that name)" in answers[0]
    assert answers[1].startswith("Nothing recorded for digest.md: it names sources that do not exist: ")
    assert "typo.md" in answers[1]
    assert all("Remove each such entry from its derived_from, or fix it" in answer for answer in answers)
    assert not any("re-derive" in answer for answer in answers)


def test_a_retrieved_stale_file_with_a_newline_in_its_name_gets_its_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "work" / "Memory"
    write(folder, "MEMORY.md", "# Memory\n", OLD)
    write(folder, "user-facts.md", SOURCE, OLD)
    write(folder, "pro\nfile.md", derived("user-facts.md"), OLD)
    memory = memory_middleware(folder.parent, retrieval_async=True)
    provenance = ProvenanceMiddleware.from_memory_middleware(memory)
    asyncio.run(adopt(provenance, monkeypatch))
    write(folder, "user-facts.md", MOVED, EDITED)

    model = retrieved([memory, provenance], asyncio.run(provenance.list_tools()), selected=["pro\nfile.md"])

    [hint] = hints(model, 1)
    assert f"{folder}/pro\nfile.md:\n\n" in hint
    assert hint.endswith("Note: pro\\u000afile.md: source(s) changed since derived (2026-11-18): user-facts.md changed")


# -- ReMe -------------------------------------------------------------------------------


def test_a_stale_file_in_a_reme_memory_message_gets_its_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "Memory"
    provenance = stale_folder(folder, ("profile.md", "fresh.md"), monkeypatch)
    write(folder, "profile.md", derived("user-facts.md") + "- A tea drinker\n  living in Lyon.\n", OLD)
    write(folder, "notes.md", "The user likes trains.\n", OLD)
    asyncio.run(provenance.record_memory_rederivation("fresh.md"))
    reme = ScriptedReMe(
        [
            {"text": "A tea drinker living in Lyon.", "path": str(folder / "profile.md")},
            {"text": "The user likes trains.", "path": str(folder / "notes.md")},
            {"text": "written from user-facts.md", "path": str(folder / "fresh.md")},
        ]
    )

    model = asyncio.run(
        ask(
            [reme, provenance],
            tools=asyncio.run(provenance.list_tools()),
            script=[tool_call(LINEAGE_TOOL, path="user-facts.md")],
        )
    )

    [shown] = [hint for hint in hints(model, 1) if hint.startswith("## Relevant memories from past conversations")]
    lines = shown.splitlines()
    assert "- A tea drinker living in Lyon." in lines
    assert [line for line in lines if line.startswith("Note: ")] == [
        "Note: profile.md: source(s) changed since derived (2026-11-18): user-facts.md changed"
    ]
