"""A transient failure never forgets a stamp or clears a mark.

Stamps are forgotten only by a re-derivation or by a readable declaration that
no longer names the source.  A scan that cannot see a file (unreadable, empty
while being rewritten, broken frontmatter, a source that is briefly a folder, a
FIFO or a link out of the root, a derived file that is briefly gone) keeps what
was stamped, and the next scan that sees the file again judges it by those
stamps.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from provgraph import Memory
from provgraph.model import EdgeStatus, ProblemKind

from .helpers import NOW, DenyingFiles, deny_listing, derived, write

PROFILE = derived("facts.md", body="The user likes tea.\n")


def _stale_profile(root: Path) -> Memory:
    """``profile.md`` derived from ``facts.md``, which then changed: stale."""
    write(root, "facts.md", "tea\n")
    write(root, "profile.md", PROFILE)
    memory = Memory(root)
    memory.refresh(now=NOW)
    write(root, "facts.md", "coffee\n")
    report = memory.refresh(now=NOW + timedelta(days=1))
    assert [entry.path for entry in report.stale] == ["profile.md"]
    return memory


def _truncate(root: Path) -> None:
    (root / "profile.md").write_bytes(b"")


def _half_written(root: Path) -> None:
    (root / "profile.md").write_bytes(b"---\nname: Pro")


def _not_utf8(root: Path) -> None:
    (root / "profile.md").write_bytes(b"---\nname: Pro\xfffile\nderived_from: facts.md\n---\nbody\n")


def _wrong_type(root: Path) -> None:
    (root / "profile.md").write_text("---\nderived_from: {facts.md: 1}\n---\nbody\n")


@pytest.mark.parametrize(
    "failure",
    [_truncate, _half_written, _not_utf8, _wrong_type],
    ids=["empty", "half-written", "not-utf8", "wrong-type"],
)
def test_a_stale_derived_file_that_cannot_be_read_for_a_while_stays_stale_and_is_never_adopted_afresh(
    failure: Callable[[Path], None], root: Path
) -> None:
    memory = _stale_profile(root)
    failure(root)
    during = memory.refresh(now=NOW + timedelta(days=2))
    assert [entry.path for entry in during.stale] == ["profile.md"], "its last declaration still holds"
    assert [problem.path for problem in during.problems] == ["profile.md"]
    write(root, "profile.md", PROFILE)
    after = memory.refresh(now=NOW + timedelta(days=3))
    assert [entry.path for entry in after.stale] == ["profile.md"]
    assert after.stale[0].since == during.stale[0].since


def test_a_stale_derived_file_that_is_unreadable_for_a_while_stays_stale(root: Path) -> None:
    _stale_profile(root)
    denied = Memory(root, files=DenyingFiles(root, {"profile.md"}))
    during = denied.refresh(now=NOW + timedelta(days=2))
    assert [entry.path for entry in during.stale] == ["profile.md"]
    assert [(p.path, p.kind) for p in during.problems] == [("profile.md", ProblemKind.UNREADABLE)]
    after = Memory(root).refresh(now=NOW + timedelta(days=3))
    assert [entry.path for entry in after.stale] == ["profile.md"]


def _folder(path: Path) -> None:
    path.mkdir()


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link_out(path: Path) -> None:
    outside = path.parent.parent / "outside" / "facts.md"
    outside.write_text("elsewhere\n")
    path.symlink_to(outside)


@pytest.mark.parametrize("shape", [_folder, _fifo, _link_out], ids=["folder", "fifo", "link-out"])
def test_a_source_that_is_briefly_not_a_file_keeps_its_stamp_and_its_change_is_reported(
    shape: Callable[[Path], None], root: Path
) -> None:
    write(root, "facts.md", "tea\n")
    write(root, "profile.md", PROFILE)
    memory = Memory(root)
    assert not memory.refresh(now=NOW).stale
    (root / "facts.md").unlink()
    shape(root / "facts.md")
    during = memory.refresh(now=NOW + timedelta(days=1))
    assert [entry.path for entry in during.stale] == ["profile.md"], "a source that cannot be read is missing"
    assert [edge.status for edge in during.edges] == [EdgeStatus.MISSING]
    path = root / "facts.md"
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    write(root, "facts.md", "coffee\n")
    after = memory.refresh(now=NOW + timedelta(days=2))
    assert [edge.status for edge in after.edges] == [EdgeStatus.CHANGED]
    write(root, "facts.md", "tea\n")
    assert not memory.refresh(now=NOW + timedelta(days=3)).stale, "the stamp is the one taken before"


def test_a_derived_file_that_disappears_and_comes_back_is_not_adopted_afresh(root: Path) -> None:
    memory = _stale_profile(root)
    content = (root / "profile.md").read_bytes()
    (root / "profile.md").unlink()
    gone = memory.refresh(now=NOW + timedelta(days=2))
    assert not gone.stale and not gone.edges, "a file that is gone is not reported"
    (root / "profile.md").write_bytes(content)
    back = memory.refresh(now=NOW + timedelta(days=3))
    assert [entry.path for entry in back.stale] == ["profile.md"]


def test_stamps_are_forgotten_by_a_readable_declaration_that_no_longer_names_the_source(root: Path) -> None:
    memory = _stale_profile(root)
    write(root, "profile.md", "---\nname: Profile\n---\nno sources now\n")
    assert not memory.refresh(now=NOW + timedelta(days=2)).stale
    write(root, "profile.md", PROFILE)
    assert not memory.refresh(now=NOW + timedelta(days=3)).stale, "declared again: adopted anew"


def test_stamps_are_forgotten_by_a_re_derivation(root: Path) -> None:
    memory = _stale_profile(root)
    memory.stamp(["profile.md"], now=NOW + timedelta(days=2))
    assert not memory.refresh(now=NOW + timedelta(days=3)).stale


def test_a_stale_derived_file_in_a_folder_that_cannot_be_read_for_a_while_stays_stale(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root, "facts.md", "tea\n")
    write(root, "notes/profile.md", derived("../facts.md"))
    memory = Memory(root)
    memory.refresh(now=NOW)
    write(root, "facts.md", "coffee\n")
    assert [entry.path for entry in memory.refresh(now=NOW + timedelta(days=1)).stale] == ["notes/profile.md"]
    deny_listing(monkeypatch, root / "notes")
    during = memory.refresh(now=NOW + timedelta(days=2))
    assert [entry.path for entry in during.stale] == ["notes/profile.md"]
    assert [(problem.path, problem.kind) for problem in during.problems] == [("notes", ProblemKind.UNREADABLE)]
    monkeypatch.undo()
    assert [entry.path for entry in memory.refresh(now=NOW + timedelta(days=3)).stale] == ["notes/profile.md"]
