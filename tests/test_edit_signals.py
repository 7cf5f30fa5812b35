"""The notes on a write of a memory file: impact, suggested ``derived_from``, re-derivation hint.

Reports come from a real ``Memory`` on a temporary folder, taken right after
the write as the integrations take them; the property tests build reports
from random lineages directly.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from provgraph import Memory
from provgraph.lineage import find_cycles, propagate
from provgraph.model import Edge, EdgeStatus, Report
from provgraph.queries import EDIT_NOTES_MAX_CHARS, Advice, EditContext, edit_notes, suggested_line

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
ADVICE = Advice(
    record_file=lambda path: f"call `record` with `{path}`",
    record_any="call `record` with its path",
    list_all=lambda path: f"call `lineage` with `{path}`",
    list_stale="call `list`",
)


def at(days: float) -> datetime:
    return T0 + timedelta(days=days)


def notes(memory, path: str, reads=(), when: float = 1, whole: bool = True, **bounds) -> str:
    """The notes on a write of ``path``: a ``Write`` of the whole file unless ``whole`` is False (an ``Edit``)."""
    report = memory.open().refresh(now=at(when))
    return edit_notes(report, EditContext(path, frozenset(reads), whole), ADVICE, **bounds)


def chain_folder(memory) -> None:
    """facts.md -> profile.md -> digest.md, adopted at T0."""
    memory.write("MEMORY.md", "index\n")
    memory.write("facts.md", "v1\n")
    memory.write("prefs.md", "tea\n")
    memory.write("profile.md", "Profile.\n", derived_from="facts.md")
    memory.write("digest.md", "Digest.\n", derived_from="profile.md")
    memory.open().refresh(now=at(0))


# -- impact -------------------------------------------------------------------------------------


def test_an_edited_source_lists_what_rests_on_its_old_content_with_chains(memory) -> None:
    chain_folder(memory)
    memory.write("facts.md", "v2\n")
    text = notes(memory, "facts.md")
    assert text.splitlines() == [
        "Memory lineage after this write (provgraph):",
        "- 2 memory files derived from facts.md now rest on its old content:",
        "  - profile.md",
        "  - digest.md, via facts.md -> profile.md -> digest.md",
        "  Update each from its sources; if one still holds as it is, call `record` with its path.",
    ]


def test_a_write_that_touches_no_lineage_gives_no_notes(memory) -> None:
    chain_folder(memory)
    memory.write("prefs.md", "coffee\n")
    memory.write("loose.md", "a new note\n")
    assert notes(memory, "prefs.md") == ""
    assert notes(memory, "loose.md") == ""
    assert notes(memory, "MEMORY.md", reads={"facts.md"}) == ""


def test_an_edit_that_restores_the_stamped_content_leaves_nothing_to_say(memory) -> None:
    chain_folder(memory)
    memory.write("facts.md", "v2\n")
    notes(memory, "facts.md")
    memory.write("facts.md", "v1\n")
    assert notes(memory, "facts.md", when=2) == ""


def test_a_declaration_written_before_its_source_changes_is_reported(memory) -> None:
    """Adopted when written: the refresh after the write stamps the source as it was."""
    memory.write("facts.md", "v1\n")
    memory.open().refresh(now=at(0))
    memory.write("profile.md", "Profile.\n", derived_from="facts.md")
    assert notes(memory, "profile.md", reads={"facts.md"}, when=0.1) == ""
    memory.write("facts.md", "v2\n")
    assert "- 1 memory file derived from facts.md now rests on its old content:" in notes(memory, "facts.md")


def test_the_impact_is_bounded_in_lines_and_characters(memory) -> None:
    memory.write("facts.md", "v1\n")
    for index in range(300):
        memory.write(f"summaries/{'long-name-' * 8}{index:03}.md", derived_from="../facts.md")
    memory.open().refresh(now=at(0))
    memory.write("facts.md", "v2\n")
    text = notes(memory, "facts.md")
    assert len(text) <= EDIT_NOTES_MAX_CHARS
    assert len([line for line in text.splitlines() if line.startswith("  - summaries/")]) == 20
    assert "  - … and 280 more; to see them all, call `lineage` with `facts.md`." in text
    small = notes(memory, "facts.md", max_chars=1500, max_lines=100)
    assert len(small) <= 1500 and "more; to see them all" in small


# -- suggestions --------------------------------------------------------------------------------


def test_a_file_written_after_reads_without_a_declaration_gets_the_exact_line(memory) -> None:
    chain_folder(memory)
    memory.write("summary.md", "The user, in short.\n")
    text = notes(memory, "summary.md", reads={"facts.md", "prefs.md", "MEMORY.md"})
    assert "  derived_from: facts.md, prefs.md" in text.splitlines()
    assert "summary.md declares no sources, but you read facts.md, prefs.md before writing it, in this reply" in text


def test_the_suggested_entries_are_relative_to_the_declaring_folder() -> None:
    assert suggested_line("work/sum.md", ["work/a.md", "facts.md"]) == "derived_from: a.md, /facts.md"
    assert suggested_line("sum.md", ["work/a.md"]) == "derived_from: work/a.md"


def test_a_file_declaring_other_sources_gets_its_line_with_the_missing_entries(memory) -> None:
    chain_folder(memory)
    text = notes(memory, "profile.md", reads={"prefs.md"})
    assert "profile.md declares other sources, but not prefs.md, read before writing it, in this reply" in text
    assert "  derived_from: facts.md, prefs.md" in text.splitlines()


def test_no_suggestion_when_the_line_could_not_be_shown_whole(memory) -> None:
    chain_folder(memory)
    many = {f"topic-{index:02}-{'x' * 20}.md" for index in range(12)}
    for name in many:
        memory.write(name, "a note\n")
    memory.write("summary.md", "Summary.\n")
    assert notes(memory, "summary.md", reads=many) == ""
    assert "derived_from: " in notes(memory, "summary.md", reads=set(sorted(many)[:3]))


def test_an_edit_of_part_of_a_file_never_gets_a_suggestion(memory) -> None:
    """What was read before adding a fact to a file is no source of the file."""
    chain_folder(memory)
    memory.write("summary.md", "The user, in short.\n")
    assert notes(memory, "summary.md", reads={"facts.md", "prefs.md"}, whole=False) == ""
    assert notes(memory, "profile.md", reads={"prefs.md"}, whole=False) == ""
    assert "derived_from: facts.md, prefs.md" in notes(memory, "summary.md", reads={"facts.md", "prefs.md"})


def test_no_suggestion_when_a_read_file_is_declared_or_would_make_a_cycle(memory) -> None:
    chain_folder(memory)
    assert notes(memory, "profile.md", reads={"facts.md", "prefs.md"}) == ""
    assert notes(memory, "facts.md", reads={"digest.md", "profile.md"}) == ""
    assert notes(memory, "facts.md", reads={"facts.md"}) == ""


# -- re-derivation ------------------------------------------------------------------------------


def test_rewriting_a_stale_file_after_reading_its_changed_sources_names_the_one_call(memory) -> None:
    chain_folder(memory)
    memory.write("facts.md", "v2\n")
    memory.open().refresh(now=at(1))
    memory.write("profile.md", "Profile, updated.\n", derived_from="facts.md")
    text = notes(memory, "profile.md", reads={"facts.md"}, when=2)
    assert (
        "- You rewrote profile.md after reading what changed in its sources (facts.md). "
        "If it now reflects them, call `record` with `profile.md` to record the re-derivation; "
        "until then it stays marked."
    ) in text
    assert "You rewrote" not in notes(memory, "profile.md", reads=set(), when=2)


# -- properties ---------------------------------------------------------------------------------


@st.composite
def lineages(draw) -> tuple[Report, str, frozenset[str]]:
    names = [f"n{index}.md" for index in range(draw(st.integers(2, 12)))]
    pairs = draw(st.sets(st.tuples(st.sampled_from(names), st.sampled_from(names)).filter(lambda p: p[0] != p[1])))
    edges = []
    for source, derived in sorted(pairs):
        status = draw(st.sampled_from(list(EdgeStatus)))
        since = None if status is EdgeStatus.CLEAN else draw(st.floats(1e9, 2e9))
        edges.append(Edge(source, derived, status, 1e9, since))
    edges_t = tuple(edges)
    report = Report("/m", T0, len(names), edges_t, propagate(edges_t), find_cycles(edges_t), ())
    return report, draw(st.sampled_from(names)), frozenset(draw(st.sets(st.sampled_from(names))))


@settings(max_examples=examples(150), deadline=None)
@given(lineages(), st.integers(0, 30), st.integers(300, 5000))
def test_notes_are_bounded_and_name_only_files_resting_on_the_edit(drawn, max_lines, max_chars) -> None:
    report, path, reads = drawn
    text = edit_notes(report, EditContext(path, reads), ADVICE, max_lines=max_lines, max_chars=max_chars)
    assert len(text) <= max_chars
    listed = [line.removeprefix("  - ").split(",")[0] for line in text.splitlines() if line.startswith("  - n")]
    resting = {entry.path for entry in report.stale if any(cause.source == path for cause in entry.causes)}
    assert set(listed) <= resting and len(listed) <= max_lines


@settings(max_examples=examples(100), deadline=None)
@given(lineages())
def test_nothing_is_said_about_a_write_that_nothing_rests_on_and_that_follows_no_read(drawn) -> None:
    report, path, _ = drawn
    resting = any(cause.source == path for entry in report.stale for cause in entry.causes)
    text = edit_notes(report, EditContext(path, frozenset()), ADVICE)
    assert (text == "") == (not resting)


# -- the README's paragraph for agents ----------------------------------------------------------


def _readme_block(marker: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```markdown\n(.*?)```", README, re.S)
    assert found is not None
    return found.group(1)


def test_the_paragraph_for_agents_shows_a_declaration_that_reads_back(tmp_path) -> None:
    paragraph = _readme_block("declare-sources")
    [line] = re.findall(r"`(derived_from: [^`]*)`", paragraph)
    root = tmp_path / "memory"
    root.mkdir()
    for name in ("user-facts.md", "preferences.md"):
        (root / name).write_text("a fact\n")
    (root / "profile.md").write_text(_readme_block("declared-example"))
    report = Memory(root).refresh(now=T0)
    sources = sorted(edge.source for edge in report.edges if edge.derived == "profile.md")
    assert sources == ["preferences.md", "user-facts.md"]
    assert line == suggested_line("profile.md", ["user-facts.md", "preferences.md"])
    assert report.problems == ()
