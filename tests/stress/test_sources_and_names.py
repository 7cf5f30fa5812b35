"""Every declared source is opened like a memory file, and every name the system gives works.

A source that is not a memory file is opened through the descriptors of its folders, none
followed if it is a symlink; a memory folder whose path is not UTF-8, and a file whose name
starts with a dash, work like any other.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from conftest import launch

from provgraph import Memory
from provgraph.model import EdgeStatus

from .helpers import NOW, assert_clean, environment, provgraph


def _derived(*sources: str) -> str:
    return "---\nderived_from: [" + ", ".join(sources) + "]\n---\nderived\n"


def test_a_declared_source_is_opened_through_its_folders_never_a_folder_swapped_for_a_link(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sub/data.txt`` is resolved inside the root, then ``sub`` becomes a link to a folder
    outside as the open begins: the file outside is never opened.  A symlinked file inside the
    root is still read through its target."""
    (root / "sub").mkdir()
    (root / "sub" / "data.txt").write_text("stamped\n")
    (root / "sub" / "alias.txt").symlink_to("data.txt")
    (root / "d.md").write_text(_derived("sub/data.txt"))
    (root / "e.md").write_text(_derived("sub/alias.txt"))
    Memory(root).refresh(now=NOW)
    outside = tmp_path / "outside"
    (outside / "data.txt").write_text("secret\n")
    secret = (outside / "data.txt").stat()
    open_ = os.open
    swapped: list[object] = []
    opened_secret: list[object] = []

    def swapping_open(path: str | os.PathLike[str], *args: object, **options: object) -> int:
        """Swaps ``sub`` when the first open on the way to the file begins: of the file by
        its resolved path, or of its folder by name."""
        if (os.fspath(path) == "sub" or os.fspath(path).endswith("/sub/data.txt")) and not swapped:
            swapped.append(path)
            (root / "sub").rename(tmp_path / "moved")
            (root / "sub").symlink_to(outside, target_is_directory=True)
        descriptor = open_(path, *args, **options)  # type: ignore[arg-type]
        found = os.fstat(descriptor)
        if (found.st_ino, found.st_dev) == (secret.st_ino, secret.st_dev):
            opened_secret.append(path)
        return descriptor

    monkeypatch.setattr(os, "open", swapping_open)
    report = Memory(root).refresh(now=NOW)
    monkeypatch.undo()
    assert swapped and opened_secret == []
    statuses = {edge.derived: edge.status for edge in report.edges}
    assert statuses["d.md"] is not EdgeStatus.CHANGED  # the content outside was never compared

    (root / "sub").unlink()
    (tmp_path / "moved").rename(root / "sub")
    assert {edge.derived: edge.status for edge in Memory(root).refresh(now=NOW).edges}["e.md"] is EdgeStatus.CLEAN
    (root / "sub" / "data.txt").write_text("edited\n")
    edges = Memory(root).refresh(now=NOW).edges
    assert {edge.derived: edge.status for edge in edges} == {"d.md": EdgeStatus.CHANGED, "e.md": EdgeStatus.CHANGED}


def _stale_folder(root: Path) -> None:
    root.mkdir()
    (root / "a.md").write_text("a\n")
    (root / "d.md").write_text(_derived("a.md"))
    Memory(root).refresh(now=NOW)
    (root / "a.md").write_text("a, edited\n")


def test_a_memory_folder_whose_path_is_not_utf8_works_in_every_command_the_hook_and_the_api(tmp_path: Path) -> None:
    root = tmp_path / os.fsdecode(b"m\xe9moire")
    _stale_folder(root)
    for memory in (Memory(root), Memory(root)):  # from scratch, then from the cache
        assert [entry.path for entry in memory.refresh(now=NOW).stale] == ["d.md"]

    for args, code in [
        (("status", root), 0),
        (("check", root), 1),
        (("prompt", root), 0),
        (("graph", root), 0),
        (("why", "--root", root, "d.md"), 0),
        (("lineage", "--root", root, "d.md"), 0),
    ]:
        done = provgraph(*args)
        assert_clean(done, code)
        assert "d.md" in done.stdout, args
    for _ in range(2):  # a state folder records the folder it belongs to, then knows it again
        done = provgraph("status", "--state", tmp_path / "state", root)
        assert_clean(done, 0)
        assert "1 derived" in done.stdout
    document = orjson.loads(provgraph("status", "--json", root).stdout)
    assert document["root"].endswith("/m\\xe9moire") and [entry["path"] for entry in document["stale"]] == ["d.md"]
    event = b'{"hook_event_name": "SessionStart", "session_id": "s"}'
    hook = launch(("hook", "claude-code", root), env=environment(), input=event)
    assert hook.code == 0 and "d.md: source(s) changed" in hook.stdout.decode(), hook.stderr
    assert_clean(provgraph("stamp", "--root", root, "d.md"), 0)
    assert_clean(provgraph("check", root), 0)


def test_a_file_named_with_a_leading_dash_is_taken_after_a_double_dash_by_why_lineage_and_stamp(root: Path) -> None:
    (root / "a.md").write_text("a\n")
    (root / "-draft.md").write_text(_derived("a.md"))
    Memory(root).refresh(now=NOW)
    (root / "a.md").write_text("a, edited\n")

    for args in (
        ("why", "--", "-draft.md"),
        ("lineage", "--", "-draft.md"),
        ("why", "--root", root, "--", "-draft.md"),
    ):
        done = provgraph(*args, cwd=root)
        assert_clean(done, 0)
        assert done.stdout.startswith("-draft.md: stale: source(s) changed since derived"), args
    assert orjson.loads(provgraph("lineage", "--json", "--", "-draft.md", cwd=root).stdout)["path"] == "-draft.md"
    done = provgraph("stamp", "--root", root, "--", "-draft.md")
    assert_clean(done, 0)
    assert done.stdout.startswith("stamped -draft.md: re-derived from 1 source")
    assert_clean(provgraph("check", root), 0)
