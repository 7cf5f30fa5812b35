"""The walk of a memory folder: what it lists, in which order, and what it never follows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from provgraph.files import LocalFiles
from provgraph.nochange import Meta, listing_bytes, metas_of, numbers_bytes
from provgraph.walk import walk_in_order


def _meta(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def _folder(root: Path) -> Path:
    for path in ("a.md", "notes/b.md", "notes/deep/c.md", "notes/data.txt", ".hidden/d.md", "e.md"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(f"{path}\n", encoding="utf-8")
    return root


def test_the_walk_in_order_lists_what_the_walk_lists_each_with_its_own_stat(tmp_path: Path) -> None:
    root = _folder(tmp_path / "memory")
    paths, numbers, problems = walk_in_order(str(root), str(root))
    listing, walk_problems = LocalFiles(root).walk()  # the walk a refresh makes
    assert sorted(paths) == sorted(listing) == ["a.md", "e.md", "notes/b.md", "notes/deep/c.md"]
    assert len(numbers) == 4 * len(paths)
    assert dict(zip(paths, metas_of(numbers), strict=True)) == {path: tuple(meta) for path, meta in listing.items()}
    assert all(_meta(os.stat(root / path)) == listing[path] for path in paths)
    assert problems == walk_problems == []


def test_the_walks_bytes_built_from_its_numbers_are_those_of_its_listing(tmp_path: Path) -> None:
    """The quick answer builds its proof from the walk's numbers as they come; the full
    rule's digest from the listing's metadata: the same bytes for the same walk."""
    root = _folder(tmp_path / "memory")
    paths, numbers, _ = walk_in_order(str(root), str(root))
    metas = list(metas_of(numbers))
    assert metas == [_meta(os.stat(root / path)) for path in paths]
    assert numbers_bytes(paths, numbers) == listing_bytes(paths, metas)
    assert numbers_bytes([], []) == listing_bytes([], [])
    with pytest.raises(ValueError):
        list(metas_of(numbers[:-1]))  # a walk's numbers come four a file


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
    paths, _, problems = walk_in_order(str(root), str(root))
    monkeypatch.undo()
    assert notes.is_symlink()
    assert sorted(paths) == ["a.md", "e.md"]
    assert [(path, kind) for path, kind, _ in problems] == [("notes", "unreadable")]


_PATHS = st.text(st.characters(blacklist_characters="\0"), min_size=1, max_size=12)
_NUMBER = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_META = st.tuples(_NUMBER, _NUMBER, _NUMBER, _NUMBER)
_LISTINGS = st.lists(st.tuples(_PATHS, _META), min_size=1, max_size=8, unique_by=lambda row: row[0])


def _changed(listing: list[tuple[str, Meta]], how: int, where: int) -> list[tuple[str, Meta]]:
    """``listing`` with one thing changed: a number, a path, two rows swapped, a row dropped or added."""
    changed = list(listing)
    where %= len(changed)
    path, (size, mtime, ctime, inode) = changed[where]
    if how == 0:
        changed[where] = path, (size, mtime, ctime + 1, inode)
    elif how == 1:
        changed[where] = path + "x", (size, mtime, ctime, inode)
    elif how == 2:
        swap = (where + 1) % len(changed)
        changed[where], changed[swap] = changed[swap], changed[where]
    elif how == 3:
        del changed[where]
    else:
        changed.append((path + "/again", (size, mtime, ctime, inode)))
    return changed


@settings(max_examples=examples(200), deadline=None)
@given(_LISTINGS, st.integers(0, 4), st.integers(0, 100))
def test_two_listings_have_the_same_bytes_only_if_they_are_the_same_in_the_same_order(
    listing: list[tuple[str, Meta]], how: int, where: int
) -> None:
    """The quick answer trusts a walk whose bytes equal the proof's: any other path,
    number, order or count must give other bytes, whatever the names hold."""
    changed = _changed(listing, how, where)

    def encoded(rows: list[tuple[str, Meta]]) -> bytes:
        return listing_bytes([path for path, _ in rows], [meta for _, meta in rows])

    assert encoded(listing) == encoded(list(listing))
    assert (encoded(changed) == encoded(listing)) == (changed == listing)
