"""The shortcuts that make provgraph cheap give the answers of a full scan.

- the no-change path (a digest of the listing, the sources outside it, the
  racy window) steps aside for every kind of change a full scan would see,
  declared sources that were refused included;
- a process keeps the last result it read only while the state file says
  the same, so another process's stamps are seen at once;
- files of the last walk are opened without resolving their paths, and still
  nothing outside the root is ever read;
- list declarations read without YAML mean what YAML reads;
- a long scan shows its progress on a terminal, and only there.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest
from cachefile import document, written
from conftest import PROVGRAPH
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import provgraph.api
import provgraph.cli
import provgraph.declarations
import provgraph.files
import provgraph.frontmatter
import provgraph.scan
import provgraph.store.state
from provgraph import Memory
from provgraph.cli import Progress, cli
from provgraph.declarations import read_declaration
from provgraph.files import LocalFiles, OutsideRoot
from provgraph.meaning import Meaning

YEAR_NS = 365 * 24 * 3600 * 10**9


@pytest.fixture
def trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by a test are younger than the racy window, so every refresh would
    read them again; a negative window is what a refresh a year later sees."""
    for module in (provgraph.files, provgraph.scan, provgraph.api, provgraph.store.state):
        monkeypatch.setattr(module, "RACY_WINDOW_NS", -YEAR_NS)


class Counting(LocalFiles):
    """Local files that count what a refresh opens."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.opened: list[str] = []

    def read(self, path: str, limit: int | None = None) -> bytes:
        self.opened.append(path)
        return super().read(path, limit)

    def sha256(self, path: str, meaning: Meaning | None = None) -> str:
        self.opened.append(path)
        return super().sha256(path, meaning)


def sources_of(report, derived: str) -> list[tuple[str, str]]:
    return [(edge.source, edge.status.value) for edge in report.edges if edge.derived == derived]


# -- the no-change path ------------------------------------------------------------------------


def test_an_unchanged_folder_is_answered_without_opening_a_file(memory, clock, trusting) -> None:
    memory.write("facts.md", "v1")
    memory.write_bytes("data/table.csv", b"a,b\n")
    memory.write("profile.md", derived_from="facts.md, data/table.csv")
    files = Counting(memory.root)
    api = memory.open(files=files)
    first = api.refresh(now=clock.now)
    files.opened.clear()
    again = api.refresh(now=clock.advance(days=1))
    assert files.opened == []
    assert again.scanned_at == clock.now and again.root == str(memory.root)
    assert again.edges == first.edges and again.stale == first.stale


def _edit_keeping_size_and_mtime(memory) -> None:
    path = memory.path("facts.md")
    before = path.stat()
    path.write_text("v2")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


CHANGES = {
    "content, same size and mtime": _edit_keeping_size_and_mtime,
    "a file added": lambda memory: memory.write("new.md", derived_from="facts.md"),
    "a file removed": lambda memory: memory.path("note.md").unlink(),
    "a declaration edited": lambda memory: memory.write("profile.md", derived_from="note.md"),
    "a source outside the listing": lambda memory: memory.write_bytes("data/table.csv", b"a,b,c\n"),
    "a missing source appearing": lambda memory: memory.write("later.md", "now here"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_change_is_seen_as_a_full_scan_sees_it(memory, clock, trusting, change, tmp_path) -> None:
    memory.write("facts.md", "v1")
    memory.write("note.md", "n")
    memory.write_bytes("data/table.csv", b"a,b\n")
    memory.write("profile.md", derived_from="facts.md, data/table.csv, later.md")
    api = memory.open()
    api.refresh(now=clock.now)
    CHANGES[change](memory)
    seen = api.refresh(now=clock.advance(days=1))
    scratch = memory.open(state=tmp_path / "scratch.json").refresh(now=clock.now)
    assert seen.file_count == scratch.file_count and seen.problems == scratch.problems
    assert [(e.source, e.derived) for e in seen.edges] == [(e.source, e.derived) for e in scratch.edges]
    if change in ("content, same size and mtime", "a source outside the listing", "a missing source appearing"):
        assert seen.stale, "the edit of a stamped source is a change"


def test_a_refused_source_that_becomes_a_file_is_adopted(memory, clock, trusting) -> None:
    """A declared source that is a folder is refused; once it is a regular file it is a source."""
    memory.write("profile.md", derived_from="table.csv")
    memory.path("table.csv").mkdir()
    api = memory.open()
    refused = api.refresh(now=clock.now)
    assert [problem.kind.value for problem in refused.problems] == ["bad-entry"]
    assert api.refresh(now=clock.advance(hours=1)).problems == refused.problems  # steady: no change
    memory.path("table.csv").rmdir()
    memory.write_bytes("table.csv", b"a,b\n")
    adopted = api.refresh(now=clock.advance(hours=1))
    assert adopted.problems == ()
    assert sources_of(adopted, "profile.md") == [("table.csv", "clean")]


def test_a_refused_source_that_leaves_the_root_is_reported_as_such(memory, clock, trusting, tmp_path) -> None:
    outside = tmp_path / "outside.csv"
    outside.write_bytes(b"secret\n")
    memory.write("profile.md", derived_from="table.csv")
    memory.path("table.csv").mkdir()
    api = memory.open()
    assert [p.kind.value for p in api.refresh(now=clock.now).problems] == ["bad-entry"]
    memory.path("table.csv").rmdir()
    memory.path("table.csv").symlink_to(outside)
    assert [p.kind.value for p in api.refresh(now=clock.advance(hours=1)).problems] == ["outside-root"]


def test_a_file_rewritten_within_the_racy_window_is_read_again(memory, clock) -> None:
    """Without the trusting fixture every test file is young: equal metadata proves nothing."""
    memory.write("facts.md", "v1")
    memory.write("profile.md", derived_from="facts.md")
    files = Counting(memory.root)
    api = memory.open(files=files)
    api.refresh(now=clock.now)
    files.opened.clear()
    api.refresh(now=clock.advance(minutes=1))
    assert "facts.md" in files.opened


# -- the last result kept in a process ----------------------------------------------------------


def test_a_kept_result_gives_way_to_another_process_stamp(memory, clock, trusting) -> None:
    memory.write("facts.md", "v1")
    memory.write("profile.md", derived_from="facts.md")
    agent = memory.open()
    agent.refresh(now=clock.now)
    memory.write("facts.md", "v2, longer")
    assert [entry.path for entry in agent.refresh(now=clock.advance(days=1)).stale] == ["profile.md"]
    assert agent.refresh(now=clock.advance(hours=1)).stale  # answered by the kept result
    memory.open().stamp(["profile.md"], now=clock.advance(hours=1))  # another process
    assert agent.refresh(now=clock.advance(hours=1)).stale == ()


def test_damaged_tables_are_set_aside_at_the_next_full_scan(memory, clock, trusting, logged) -> None:
    memory.write("facts.md", "v1")
    memory.write("profile.md", derived_from="facts.md")
    api = memory.open()
    api.refresh(now=clock.now)
    state = api.state_path / "cache.json"
    damaged = document(state.read_bytes())
    damaged["rows"] = [1, 2]
    state.write_bytes(written(damaged))
    memory.write("note.md", "a new file: the next refresh scans")
    report = memory.open().refresh(now=clock.advance(days=1))
    assert any("could not be read" in warning for warning in logged.take())
    assert sources_of(report, "profile.md") == [("facts.md", "clean")]
    assert [path.name for path in state.parent.iterdir() if ".corrupt-" in path.name]


# -- opening the files of the last walk ---------------------------------------------------------


def _folder_swapped_for_a_link_outside_after_the_walk(tmp_path: Path) -> LocalFiles:
    root = tmp_path / "memory"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "s.md").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "s.md").write_text("secret\n")
    files = LocalFiles(root)
    listing, _ = files.walk()
    assert list(listing) == ["sub/s.md"]
    (root / "sub").rename(tmp_path / "moved")
    (root / "sub").symlink_to(outside)
    return files


def test_a_folder_swapped_for_a_link_outside_after_the_walk_is_not_read(tmp_path: Path) -> None:
    files = _folder_swapped_for_a_link_outside_after_the_walk(tmp_path)
    with pytest.raises(OutsideRoot):
        files.read("sub/s.md")
    with pytest.raises(OutsideRoot):
        files.sha256("sub/s.md")


def test_a_folder_swapped_for_a_link_outside_is_not_followed_by_a_scans_reads(tmp_path: Path) -> None:
    """A scan reads a folder's files through a descriptor of the folder (``LocalFiles.reading``)."""
    files = _folder_swapped_for_a_link_outside_after_the_walk(tmp_path)
    with files.reading(), pytest.raises(OutsideRoot):
        files.read("sub/s.md")


def test_a_file_replaced_after_the_walk_is_read_as_it_is_now(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    root.mkdir()
    (root / "a.md").write_text("first\n")
    files = LocalFiles(root)
    files.walk()
    (root / "a.md").unlink()
    (root / "a.md").write_text("second, a new file\n")
    assert files.read("a.md") == b"second, a new file\n"


# -- list declarations without YAML --------------------------------------------------------------

_PLAIN_ENTRY = st.from_regex(r"[A-Za-z0-9_./][A-Za-z0-9_ ./\-]{0,12}", fullmatch=True)
_ANY_ENTRY = st.one_of(_PLAIN_ENTRY, st.text("ab.-_ /:#[]'\"yesno0123", max_size=10))


@st.composite
def list_declarations(draw) -> str:
    entries = draw(st.lists(_ANY_ENTRY, max_size=4))
    if draw(st.booleans()):
        value = "[" + ", ".join(entries) + draw(st.sampled_from(["]", ", ]", "] # note"]))
        lines = [f"derived_from: {value}"]
    else:
        indent = draw(st.sampled_from(["", "  ", "    "]))
        lines = ["derived_from:"] + [f"{indent}- {entry}" for entry in entries]
        if entries and draw(st.booleans()):
            lines.append(" " + indent + "- " + entries[0])  # a different indentation
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "name: n")
    return "---\n" + "\n".join(lines) + "\n---\nbody\n"


@settings(max_examples=examples(300), deadline=None)
@given(list_declarations())
def test_lists_read_without_yaml_mean_what_yaml_reads(text: str) -> None:
    fast = read_declaration(text.encode())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provgraph.frontmatter, "_plain_list", lambda value, continued: None)
        assert read_declaration(text.encode()) == fast


# -- progress of a long scan --------------------------------------------------------------------


def test_a_scan_reports_its_progress_and_the_no_change_path_does_not(memory, clock, trusting) -> None:
    for index in range(600):
        memory.write(f"notes/n{index:03d}.md", f"note {index}")
    memory.write("digest.md", derived_from="notes/n000.md, notes/n599.md")
    calls: list[tuple[int, int]] = []
    api = Memory(memory.root, progress=lambda done, total: calls.append((done, total)))
    api.refresh(now=clock.now)
    assert calls[0] == (0, 601) and calls[-1] == (601, 601)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls) and len(calls) > 2
    calls.clear()
    api.refresh(now=clock.advance(hours=1))
    assert calls == []


class Ticking:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_waits_for_a_slow_scan_and_erases_its_line() -> None:
    clock, stream = Ticking(), io.StringIO()
    progress = Progress(stream, after=1.0, clock=clock)
    progress(0, 5000)
    clock.now += 0.5
    progress(256, 5000)
    assert stream.getvalue() == ""
    clock.now += 1.0
    progress(512, 5000)
    assert stream.getvalue() == "\rprovgraph: scanning 512 of 5,000 memory files"
    progress(5000, 5000)
    shown = len("provgraph: scanning 512 of 5,000 memory files")
    assert stream.getvalue().endswith("\r" + " " * shown + "\r")


def test_a_quick_scan_shows_nothing(memory, clock) -> None:
    stream = io.StringIO()
    progress = Progress(stream)
    memory.write("a.md", derived_from="b.md")
    Memory(memory.root, progress=progress).refresh(now=clock.now)
    assert stream.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_the_command_shows_progress_on_a_terminal_only(memory, monkeypatch, capsys, terminal) -> None:
    for index in range(300):
        memory.write(f"n{index:03d}.md", derived_from="n000.md" if index else None)
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(provgraph.cli, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert cli("status", str(memory.root)) == 0
    assert ("scanning" in stderr.getvalue()) is terminal
    assert capsys.readouterr().out.startswith("300 memory files")


def test_a_quick_command_on_a_real_terminal_prints_nothing_on_it(memory) -> None:
    memory.write("a.md", derived_from="b.md")
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [os.fspath(PROVGRAPH), "check", str(memory.root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=60,
            check=False,
        )
        os.close(follower)
        follower = -1
        assert done.returncode == 1  # a.md's source is missing
        assert _drain(leader) == b""
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


def _drain(descriptor: int) -> bytes:
    chunks = []
    while select.select([descriptor], [], [], 0.2)[0]:
        try:
            chunk = os.read(descriptor, 4096)
        except OSError:  # the terminal's other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)
