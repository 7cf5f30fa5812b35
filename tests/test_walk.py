"""The walk of a memory folder: what it lists, in which order, and what it never follows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from provgraph.files import LocalFiles, walk_folder


def _meta(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def _folder(root: Path) -> Path:
    for path in ("a.md", "notes/b.md", "notes/deep/c.md", "notes/data.txt", ".hidden/d.md", "e.md"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(f"{path}\n", encoding="utf-8")
    return root


def test_the_walk_lists_every_memory_file_below_the_root_each_with_its_own_stat(tmp_path: Path) -> None:
    root = _folder(tmp_path / "memory")
    listing, problems = walk_folder(str(root), str(root))
    assert sorted(listing) == ["a.md", "e.md", "notes/b.md", "notes/deep/c.md"]
    assert all(_meta(os.stat(root / path)) == tuple(meta) for path, meta in listing.items())
    assert (listing, problems) == LocalFiles(root).walk()
    assert problems == []


def test_a_folder_swapped_for_a_link_during_the_walk_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed as a folder, replaced by a link to a folder outside before the walk enters
    it: the walk reports it and lists nothing from outside the root."""
    root = _folder(tmp_path / "memory")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n", encoding="utf-8")
    notes, real_open = root / "notes", os.open

    def swapping_open(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if isinstance(path, str) and path == str(notes) and not notes.is_symlink():
            notes.rename(tmp_path / "moved")
            notes.symlink_to(outside, target_is_directory=True)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", swapping_open)
    listing, problems = walk_folder(str(root), str(root))
    monkeypatch.undo()
    assert notes.is_symlink()
    assert sorted(listing) == ["a.md", "e.md"]
    assert [(problem.path, problem.kind) for problem in problems] == [("notes", "unreadable")]
