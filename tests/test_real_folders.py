"""Real memory folders, written as their tools write them, read with nothing added.

``tests/folders/`` holds three folders: an Obsidian LLM wiki whose lineage is Dataview
fields mixed with prose, a Claude Code auto memory folder, and a ReMe vault whose digests
list their sources under ``## Sources``.  Beside each, ``NAME.expected.json`` is what a
careful reader sees in the lineage fields: the edges ``[derived, source]`` (root-relative
POSIX paths, a link to a page that does not exist included), the missing sources, the
ambiguous wiki links with their candidates, the entries that cannot be file names, the
reading option the folder needs, and for lineage written in words provgraph does not read,
the option a hint should name.  Each test copies a folder and holds one rule of issue 25
against that ground truth; a rule the code does not hold yet is marked ``xfail(strict=True)``
for that folder, so the marker goes when the rule is implemented.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import Runner, launch

from provgraph import EdgeStatus, Memory, ProblemKind, Report

FOLDERS = Path(__file__).parent / "folders"
WIKI, CLAUDE, REME = "llm-wiki", "claude-code-memory", "reme-vault"

MIN_PRECISION, MIN_RECALL = 0.97, 0.90
LONGEST_STATUS_LINE = 400


class Ambiguous(NamedTuple):
    """A wiki link naming several files: no edge, a problem of ``file`` listing them."""

    file: str
    name: str
    candidates: tuple[str, ...]


class BadEntry(NamedTuple):
    """An entry that cannot be a file name: no edge, a ``bad-entry`` of ``file`` at ``line``."""

    file: str
    line: int
    why: str


@dataclass(frozen=True, slots=True)
class Truth:
    """What a careful reader sees in one folder's lineage fields (its ``.expected.json``)."""

    name: str
    sources_heading: str | None
    edges: frozenset[tuple[str, str]]
    missing: frozenset[tuple[str, str]]
    ambiguous: tuple[Ambiguous, ...]
    bad_entries: tuple[BadEntry, ...]
    read_by: str | None
    """The option that reads lineage the folder writes in other words, when nothing is declared."""

    @classmethod
    def of(cls, name: str) -> Truth:
        data = json.loads((FOLDERS / f"{name}.expected.json").read_text(encoding="utf-8"))
        return cls(
            name=name,
            sources_heading=data["sources_heading"],
            edges=frozenset(map(tuple, data["edges"])),
            missing=frozenset(map(tuple, data["missing"])),
            ambiguous=tuple(
                Ambiguous(**{**entry, "candidates": tuple(entry["candidates"])}) for entry in data["ambiguous"]
            ),
            bad_entries=tuple(BadEntry(**entry) for entry in data["bad_entries"]),
            read_by=data.get("lineage_in_other_words", {}).get("read_by"),
        )

    def below(self, sources: Iterable[str]) -> set[str]:
        """Every file derived, at any depth, from one of ``sources``."""
        reached: set[str] = set()
        frontier = set(sources)
        while frontier:
            frontier = {derived for derived, source in self.edges if source in frontier} - reached
            reached |= frontier
        return reached

    def stale_on_first_run(self) -> set[str]:
        """The files a first run marks stale: those that reach a missing source."""
        return self.below(source for _, source in self.missing)

    def busiest_source(self) -> str:
        """The existing source with the most files derived from it (the first by name on a tie)."""
        missing = {source for _, source in self.missing}
        sources = sorted({source for _, source in self.edges} - missing)
        return max(sources, key=lambda source: len(self.below([source])))


def issue_25(rule: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"issue 25: {rule}")


def folders(failing: dict[str, str] | None = None) -> list[object]:
    """The three folders as parameters; ``failing`` maps a folder to the rule it breaks today."""
    failing = failing or {}
    return [
        pytest.param(name, id=name, marks=[issue_25(failing[name])] if name in failing else [])
        for name in (WIKI, CLAUDE, REME)
    ]


def copied(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(FOLDERS / name, root)
    return root


def refreshed(truth: Truth, tmp_path: Path) -> tuple[Path, Report]:
    """A fresh copy of the folder and its first refresh, read with the folder's own option."""
    root = copied(truth.name, tmp_path)
    return root, Memory(root, sources_heading=truth.sources_heading).refresh()


def edit(path: Path) -> None:
    """A real edit: a line added, as an agent adds a fact."""
    with path.open("a", encoding="utf-8") as file:
        file.write("\nOne more fact, added later.\n")


def after(tool: str, root: Path, name: str) -> str:
    """What Claude Code's hook tells the agent after ``tool`` on ``name``, as Claude Code sends it."""
    file = str(root / name)
    sent = {
        "session_id": "s-1",
        "transcript_path": "/home/me/.claude/projects/club-site/s-1.jsonl",
        "cwd": "/home/me/src/club-site",
        "hook_event_name": "PostToolUse",
        "tool_name": tool,
        "tool_input": {"file_path": file},
        "tool_response": {"filePath": file, "success": True},
        "tool_use_id": "toolu_01",
    }
    done = launch(["hook", "claude-code", root], input=json.dumps(sent).encode(), cwd=root)
    assert (done.code, done.stderr) == (0, b""), done.stderr
    said = done.stdout.decode()
    return json.loads(said)["hookSpecificOutput"]["additionalContext"] if said else ""


def found_edges(report: Report) -> set[tuple[str, str]]:
    return {(edge.derived, edge.source) for edge in report.edges}


def scores(found: set[tuple[str, str]], truth: Truth) -> tuple[float, float, str]:
    """Precision and recall of ``found`` against the truth, and a text that shows them."""
    right = found & truth.edges
    precision = len(right) / len(found) if found else 0.0
    recall = len(right) / len(truth.edges)
    wrong = "".join(f"\n  not in the fields: {edge!r:.160}" for edge in sorted(found - truth.edges))
    missed = "".join(f"\n  missed: {edge}" for edge in sorted(truth.edges - found))
    text = (
        f"{truth.name}: {len(found)} edges found, {len(right)} of {len(truth.edges)} right: "
        f"precision {precision:.2f}, recall {recall:.2f}{wrong}{missed}"
    )
    return precision, recall, text


def status_command(truth: Truth) -> list[str]:
    option = [f"--sources-heading={truth.sources_heading}"] if truth.sources_heading else []
    return ["status", *option]


# -- the ground truth itself ------------------------------------------------------------------


@pytest.mark.parametrize("name", folders())
def test_the_ground_truth_names_the_files_of_its_folder(name: str) -> None:
    truth = Truth.of(name)
    files = {path.relative_to(FOLDERS / name).as_posix() for path in (FOLDERS / name).rglob("*") if path.is_file()}
    named = {path for edge in truth.edges for path in edge}
    missing = {source for _, source in truth.missing}
    assert truth.missing <= truth.edges
    assert named - files == missing
    assert not missing & files
    assert {path for entry in truth.ambiguous for path in entry.candidates} <= files


# -- found edges are the links a reader sees --------------------------------------------------


@pytest.mark.parametrize("name", folders())
def test_found_edges_are_the_links_a_reader_sees_in_the_fields(name: str, tmp_path: Path) -> None:
    truth = Truth.of(name)
    _, report = refreshed(truth, tmp_path)
    precision, recall, text = scores(found_edges(report), truth)
    assert precision >= MIN_PRECISION and recall >= MIN_RECALL, text


# -- the first run marks nothing stale because of prose ---------------------------------------


@pytest.mark.parametrize("name", folders())
def test_the_first_run_marks_nothing_stale_because_of_prose(name: str, tmp_path: Path) -> None:
    truth = Truth.of(name)
    _, report = refreshed(truth, tmp_path)
    missing = {source for _, source in truth.missing}
    causes = {(entry.path, cause.source) for entry in report.stale for cause in entry.causes}
    by_prose = "".join(f"\n  {path} <- {source!r:.160}" for path, source in sorted(causes) if source not in missing)
    expected = truth.stale_on_first_run()
    assert {path for path, _ in causes} == expected, (
        f"stale on a folder nobody edited, {sorted(expected)} expected:{by_prose}"
    )


@pytest.mark.parametrize("name", folders())
def test_an_edit_of_a_source_marks_exactly_the_files_derived_from_it(name: str, tmp_path: Path) -> None:
    truth = Truth.of(name)
    root, _ = refreshed(truth, tmp_path)
    edited = truth.busiest_source()
    edit(root / edited)
    report = Memory(root, sources_heading=truth.sources_heading).refresh()
    assert {entry.path for entry in report.stale} == truth.below([edited]) | truth.stale_on_first_run(), edited


# -- problems name the file to fix ------------------------------------------------------------


@pytest.mark.parametrize("name", folders())
def test_an_ambiguous_wiki_link_is_a_problem_listing_its_candidates(name: str, tmp_path: Path) -> None:
    truth = Truth.of(name)
    _, report = refreshed(truth, tmp_path)
    for entry in truth.ambiguous:
        details = [problem.detail for problem in report.problems if problem.path == entry.file]
        assert any(all(path in detail for path in entry.candidates) for detail in details), (entry, details)
        assert not {(entry.file, path) for path in entry.candidates} & found_edges(report), entry


@pytest.mark.parametrize("name", folders())
def test_a_link_to_a_page_that_does_not_exist_is_a_missing_source(name: str, tmp_path: Path) -> None:
    truth = Truth.of(name)
    _, report = refreshed(truth, tmp_path)
    missing = {(edge.derived, edge.source) for edge in report.edges if edge.status == EdgeStatus.MISSING}
    assert missing == set(truth.missing)


@pytest.mark.parametrize("name", folders())
def test_an_entry_that_cannot_be_a_file_name_is_a_bad_entry_of_the_declaring_file(name: str, tmp_path: Path) -> None:
    truth = Truth.of(name)
    _, report = refreshed(truth, tmp_path)
    problems = [(problem.path, problem.kind, problem.detail) for problem in report.problems]
    for entry in truth.bad_entries:
        line = re.compile(rf"\b{entry.line}\b")
        assert any(
            path == entry.file and kind == ProblemKind.BAD_ENTRY and line.search(detail)
            for path, kind, detail in problems
        ), (entry, problems)
    assert not [problem for problem in problems if problem[1] == ProblemKind.UNREADABLE]


# -- what the command prints ------------------------------------------------------------------


@pytest.mark.parametrize("name", folders())
def test_no_status_line_is_longer_than_400_characters(name: str, tmp_path: Path, run: Runner) -> None:
    truth = Truth.of(name)
    root = copied(name, tmp_path)
    _, out, err = run(*status_command(truth), cwd=root)
    long = [line for line in (out + err).splitlines() if len(line) > LONGEST_STATUS_LINE]
    assert not long, f"{len(long)} lines, the longest {max(map(len, long))} characters: {long[0][:200]}"


def test_status_names_the_option_that_reads_a_vault_whose_lineage_is_a_sources_heading(
    tmp_path: Path, run: Runner
) -> None:
    truth = Truth.of(REME)
    root = copied(REME, tmp_path)
    code, out, err = run("status", cwd=root)
    assert code == 0, err
    assert truth.read_by and truth.read_by in out + err, out


def test_a_run_without_the_option_that_wrote_the_lock_never_loses_a_stamp(tmp_path: Path, run: Runner) -> None:
    truth = Truth.of(REME)
    root, _ = refreshed(truth, tmp_path)
    code, out, err = run("status", cwd=root)
    assert code == 0 or "--sources-heading" in err, (code, out, err)
    edited = truth.busiest_source()
    edit(root / edited)
    report = Memory(root, sources_heading=truth.sources_heading).refresh()
    assert {entry.path for entry in report.stale} == truth.below([edited]), edited


# -- advice an agent can follow ---------------------------------------------------------------


def test_the_hook_suggests_lineage_only_for_a_new_file_and_only_from_what_was_read_for_it(tmp_path: Path) -> None:
    root = copied(CLAUDE, tmp_path)
    Memory(root).refresh()
    assert after("Read", root, "feedback_no-fabrication.md") == ""
    edit(root / "project_ai-club.md")
    advice = after("Edit", root, "project_ai-club.md")
    assert "project_ai-club-schedule.md" in advice  # the impact note on an edit of a source stays
    assert "feedback_no-fabrication.md" not in advice, advice
    after("Read", root, "project_release-freeze.md")
    after("Read", root, "project_ai-club-schedule.md")
    (root / "project_parents-letter.md").write_text(
        "---\nname: Parents' letter\ntype: project\n---\nShowcase on 2026-12-11.\n"
    )
    advice = after("Write", root, "project_parents-letter.md")
    suggested = [line for line in advice.splitlines() if "derived_from:" in line]
    assert any("project_release-freeze.md" in line and "project_ai-club-schedule.md" in line for line in suggested), (
        advice
    )
    assert "feedback_no-fabrication.md" not in advice, advice
