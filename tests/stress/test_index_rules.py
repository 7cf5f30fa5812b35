"""The memory index (``MEMORY.md``): its entries derive from each listed file's name,
description and type; dangling, orphan, outdated and duplicate entries are reported
everywhere, and ``provgraph index`` prints the index as it should be."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import provgraph.api
import provgraph.files
import provgraph.scan
import provgraph.store.state
from provgraph import Memory, OptionsDiffer
from provgraph.model import INDEX_KINDS, ProblemKind

T0 = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)


def at(days: float) -> datetime:
    return T0 + timedelta(days=days)


def note(name: str, description: str, kind: str = "user", body: str = "body\n", extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: {kind}\n{extra}---\n{body}"


def index_problems(report) -> list[tuple[str, str]]:
    return [(problem.kind.value, problem.path) for problem in report.index_problems]


@pytest.fixture
def claude_folder(memory):
    """A Claude Code memory folder whose index lists every file, adopted at T0."""
    memory.write("MEMORY.md", "- [Facts](facts.md) — where the user lives\n- [Prefs](prefs.md) — how to answer\n")
    memory.write("facts.md", note("Facts", "where the user lives"))
    memory.write("prefs.md", note("Prefs", "how to answer", "feedback"))
    assert index_problems(Memory(memory.root).refresh(now=at(0))) == []
    return memory


@pytest.fixture
def with_profile(memory):
    """``claude_folder`` with a listed profile derived from facts.md."""
    memory.write("MEMORY.md", "- [Facts](facts.md) — where the user lives\n- [Profile](profile.md) — who\n")
    memory.write("facts.md", note("Facts", "where the user lives"))
    memory.write("profile.md", note("Profile", "who", extra="derived_from: facts.md\n"))
    assert index_problems(Memory(memory.root).refresh(now=at(0))) == []
    return memory


def drift(folder) -> None:
    """The done-when drift: an entry to a deleted file, two files not listed, one description edited."""
    folder.path("prefs.md").unlink()
    folder.write("travel.md", note("Travel", "trips planned"))
    folder.write("team.md", note("Team", "who works with the user"))
    folder.path("facts.md").write_text(note("Facts", "where the user lives and works"))


def test_a_drifted_index_is_named_by_status_failed_by_check_shown_in_the_block_and_mended_by_index(
    claude_folder, run
) -> None:
    drift(claude_folder)
    root = claude_folder.root
    code, out, _ = run("status", "--json", cwd=root, now=at(2).isoformat())
    kinds = [(problem["kind"], problem["path"]) for problem in json.loads(out)["problems"]]
    assert kinds == [
        ("dangling-entry", "prefs.md"),
        ("orphan", "team.md"),
        ("orphan", "travel.md"),
        ("outdated-entry", "facts.md"),
    ]
    assert run("check", cwd=root, now=at(2).isoformat())[0] == 1
    block = run("prompt", cwd=root, now=at(2).isoformat())[1]
    assert "provgraph index" in block and "- prefs.md: dangling-entry:" in block and "- team.md: orphan:" in block
    code, printed, err = run("index", cwd=root, now=at(2).isoformat())
    assert (code, err) == (0, "")
    assert printed == (
        "- [Facts](facts.md) — where the user lives and works\n"
        "- [Team](team.md) — who works with the user\n"
        "- [Travel](travel.md) — trips planned\n"
    )
    (root / "MEMORY.md").write_text(printed)
    assert run("check", cwd=root, now=at(3).isoformat()) == (0, "", "")


def test_provgraph_index_never_writes_a_memory_file(claude_folder, run) -> None:
    drift(claude_folder)
    before = {path: path.read_bytes() for path in claude_folder.root.glob("*.md")}
    assert run("index", cwd=claude_folder.root)[0] == 0
    assert {path: path.read_bytes() for path in claude_folder.root.glob("*.md")} == before


def test_a_body_edit_marks_the_derived_files_but_not_the_index(with_profile) -> None:
    with_profile.path("facts.md").write_text(note("Facts", "where the user lives", body="moved to Oslo\n"))
    report = Memory(with_profile.root).refresh(now=at(1))
    assert [entry.path for entry in report.stale] == ["profile.md"]
    assert index_problems(report) == []


def test_a_description_edit_marks_the_entry_and_the_derived_files_with_the_date(with_profile) -> None:
    with_profile.write("facts.md", note("Facts", "where the user lives now"), mtime=at(1))
    report = Memory(with_profile.root).refresh(now=at(2))
    assert [entry.path for entry in report.stale] == ["profile.md"]
    (problem,) = report.index_problems
    assert (problem.kind, problem.path) == (ProblemKind.OUTDATED_ENTRY, "facts.md")
    assert "since 2026-11-11" in problem.detail
    later = Memory(with_profile.root).refresh(now=at(5))
    assert later.index_problems == report.index_problems  # the date does not move


def test_a_refresh_patched_after_a_description_edit_reports_the_index_as_a_full_scan_does(with_profile) -> None:
    lived = Memory(with_profile.root)
    lived.refresh(now=at(0.5))
    with_profile.write("facts.md", note("Facts", "where the user lives now"), mtime=at(0.7))
    patched = lived.refresh(now=at(1))
    full = Memory(with_profile.root, trust_cache=False).refresh(now=at(1))
    assert patched.problems == full.problems and index_problems(patched) == [("outdated-entry", "facts.md")]
    assert lived.refresh(now=at(2)).problems == full.problems


def test_a_description_edit_undone_clears_the_entry(claude_folder) -> None:
    claude_folder.write("facts.md", note("Facts", "elsewhere"))
    assert index_problems(Memory(claude_folder.root).refresh(now=at(1))) == [("outdated-entry", "facts.md")]
    claude_folder.write("facts.md", note("Facts", "where the user lives"))
    assert index_problems(Memory(claude_folder.root).refresh(now=at(2))) == []


def test_a_first_run_adopts_the_entries_but_reports_dangling_orphans_and_duplicates(memory) -> None:
    memory.write("MEMORY.md", "- [Old title](a.md) — old hook\n- [Gone](gone.md) — x\n- [A](a.md) — again\n")
    memory.write("a.md", note("A", "a description that the index line does not show"))
    memory.write("b.md", note("B", "not listed"))
    report = Memory(memory.root).refresh(now=at(0))
    assert index_problems(report) == [("dangling-entry", "gone.md"), ("orphan", "b.md"), ("duplicate-entry", "a.md")]
    assert "lines 1, 3" in report.index_problems[-1].detail


def test_entries_are_read_in_every_line_form(memory) -> None:
    memory.write(
        "MEMORY.md",
        "# Memory\n\nSome prose with a [link](https://example.com).\n"
        "- [A](a.md) — hook\n* [B](./b.md) -- hook\n- [C](c.md) - hook\n- [D](notes/../d.md): hook\n- [[e]] — hook\n"
        "- [F](f.md)\n```markdown\n- [Example](example.md) — in a code block, no entry\n```\n",
    )
    for name in "abcdef":
        memory.write(f"{name}.md", note(name.upper(), "d"))
    assert index_problems(Memory(memory.root).refresh(now=at(0))) == []


def test_a_dangling_entry_names_the_file_its_fields_moved_to(claude_folder) -> None:
    claude_folder.path("prefs.md").rename(claude_folder.path("answers.md"))
    report = Memory(claude_folder.root).refresh(now=at(1))
    dangling = [problem for problem in report.index_problems if problem.kind is ProblemKind.DANGLING_ENTRY]
    assert [problem.path for problem in dangling] == ["prefs.md"]
    assert dangling[0].detail.endswith("(renamed to answers.md?)")


def test_stamp_of_the_index_takes_a_type_change_and_refuses_a_dangling_entry(claude_folder, run) -> None:
    claude_folder.path("prefs.md").write_text(note("Prefs", "how to answer", "project"))
    root = claude_folder.root
    assert run("check", cwd=root, now=at(1).isoformat())[0] == 1  # the type changed: no line shows it
    assert run("stamp", "MEMORY.md", cwd=root, now=at(2).isoformat())[0] == 0
    assert run("check", cwd=root, now=at(3).isoformat()) == (0, "", "")
    claude_folder.path("facts.md").unlink()
    code, _, err = run("stamp", "MEMORY.md", cwd=root, now=at(4).isoformat())
    assert code == 2 and err.count("\n") == 1 and "facts.md" in err and "provgraph index" in err


def test_the_index_options_are_recorded_in_the_lock_and_another_refused(memory) -> None:
    memory.write("MEMORY.md", "# Memory\n")
    memory.write("topics/INDEX.md", "- [Trips](trips.md) — trips\n")
    memory.write("topics/trips.md", note("Trips", "trips"))
    memory.write("topics/draft.md", note("Draft", "not yet"))
    memory.write("topics/scratch-1.md", note("Scratch", "scratch"))
    report = Memory(memory.root, index_files=["topics/INDEX.md"], unindexed=["*/scratch-*"]).refresh(now=at(0))
    assert index_problems(report) == [("orphan", "topics/draft.md")]
    assert index_problems(Memory(memory.root).refresh(now=at(1))) == [("orphan", "topics/draft.md")]
    with pytest.raises(OptionsDiffer):
        Memory(memory.root, index_files=["other.md"]).refresh(now=at(2))


def test_an_index_outside_the_root_is_refused_in_one_line(memory, run) -> None:
    memory.write("a.md", note("A", "a"))
    for named in ("../MEMORY.md", "/etc/MEMORY.md", "notes.txt"):
        code, out, err = run("status", "--index", named, cwd=memory.root)
        assert (code, out) == (2, "") and err.count("\n") == 1 and repr(named) in err


def test_a_memory_md_of_prose_alone_is_no_index_and_a_folder_without_one_reads_as_before(memory) -> None:
    memory.write("MEMORY.md", "# Memory\nNotes about the user.\n")
    memory.write("a.md", note("A", "a"))
    report = Memory(memory.root).refresh(now=at(0))
    assert report.problems == () and not (memory.root / "provgraph.lock").exists()
    memory.path("MEMORY.md").unlink()  # a folder without one reads as it always has
    assert Memory(memory.root).refresh(now=at(1)).problems == () and not (memory.root / "provgraph.lock").exists()


def test_the_block_lists_index_problems_in_repair_order_within_the_line_cap(memory, run) -> None:
    memory.write("MEMORY.md", "- [A](a.md)\n- [A](a.md)\n- [Gone](gone.md)\n")
    memory.write("a.md", note("A", "a"))
    for number in range(5):
        memory.write(f"n{number}.md", note("N", "n"))
    block = run("prompt", "--max-lines", "3", cwd=memory.root)[1].splitlines()
    assert [line.split(":")[1].strip() for line in block if line.startswith("- ") and ":" in line] == [
        "dangling-entry",
        "orphan",
        "orphan",
    ]
    assert block[-2] == "- … and 4 more index problems."


def test_the_index_kinds_are_documented_for_json() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "command-line.md").read_text(encoding="utf-8")
    assert all(f"`{kind.value}`" in page for kind in INDEX_KINDS)


_NAMES = st.sampled_from(
    [f"n{number}.md" for number in range(4)] + ["a b.md", "p(1).md", "50%.md", "line\nbreak.md", "[x].md", "é.md"]
)
"""File names, some that a link target must escape: a space, parentheses, ``%``, a line break."""
_WORDS = st.text(alphabet="abc xyz", min_size=1, max_size=12).map(lambda text: " ".join(text.split()) or "w")


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    present=st.dictionaries(_NAMES, st.tuples(_WORDS, _WORDS), min_size=1),
    listed=st.lists(_NAMES, max_size=8),
    edits=st.dictionaries(_NAMES, st.tuples(_WORDS, _WORDS)),
    removed=st.sets(_NAMES),
)
def test_the_printed_index_once_written_leaves_no_index_problem(
    tmp_path_factory, present, listed, edits, removed
) -> None:
    root = tmp_path_factory.mktemp("memory")
    (root / "MEMORY.md").write_text(
        "# Memory\n" + "".join(f"- [{name}]({name}) — hook\n" for name in listed or ["n0.md"])
    )
    for name, (title, description) in present.items():
        (root / name).write_text(note(title, description))
    Memory(root).refresh(now=at(0))
    for name, (title, description) in edits.items():
        (root / name).write_text(note(title, description))
    for name in removed:
        (root / name).unlink(missing_ok=True)
    printed = Memory(root).index(now=at(1))
    (root / "MEMORY.md").write_text(printed)
    assert Memory(root).refresh(now=at(2)).index_problems == ()


def test_after_a_small_change_the_entries_of_the_files_it_did_not_move_are_not_read_again(with_profile, monkeypatch):
    """A new process (a hook, a command) after a write reads the fields of the written file only."""
    for module in (provgraph.files, provgraph.scan, provgraph.api, provgraph.store.state):
        monkeypatch.setattr(module, "RACY_WINDOW_NS", -365 * 86_400 * 10**9)  # a refresh a year later: no file is racy

    for number in range(5):
        with_profile.write(f"n{number}.md", note(f"N{number}", "unchanged"))
    with_profile.write(
        "MEMORY.md",
        with_profile.path("MEMORY.md").read_text()
        + "".join(f"- [N{number}](n{number}.md) — unchanged\n" for number in range(5)),
    )
    assert index_problems(Memory(with_profile.root).refresh(now=at(0.2))) == []
    with_profile.write("facts.md", note("Facts", "where the user lives now"), mtime=at(0.7))
    read: list[bytes] = []
    reader = provgraph.scan.read_fields
    monkeypatch.setattr(provgraph.scan, "read_fields", lambda head: read.append(head) or reader(head))
    report = Memory(with_profile.root).refresh(now=at(1))
    assert index_problems(report) == [("outdated-entry", "facts.md")]
    assert len(read) == 1 and b"where the user lives now" in read[0]


def test_an_index_link_written_as_an_absolute_path_under_the_root_is_its_file(memory) -> None:
    memory.write("MEMORY.md", f"- [Facts]({memory.root / 'facts.md'}) — where the user lives\n")
    memory.write("facts.md", note("Facts", "where the user lives"))
    assert index_problems(Memory(memory.root).refresh(now=at(0))) == []
