"""A memory file is read and hashed whole (or read up to the limit asked), whatever each
read returns.

Reading stops after one read when that read gives as many bytes as the open file
had; a short read (network and FUSE file systems, signals) or a file that grew or
shrank meanwhile is read on to its real end.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from provgraph import files
from provgraph.files import LocalFiles

CONTENT = b"---\nderived_from: a.md\n---\n" + b"line of the body\n" * 40


def _listed(root: Path) -> LocalFiles:
    (root / "note.md").write_bytes(CONTENT)
    source = LocalFiles(root)
    source.walk()
    return source


@pytest.mark.parametrize("limit", [None, 1, 10, len(CONTENT) - 1, len(CONTENT), len(CONTENT) + 1, 64 * 1024])
def test_a_file_is_read_whole_however_short_each_read_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    source = _listed(tmp_path)
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda descriptor, wanted: real_read(descriptor, min(wanted, 7)))
    assert source.read("note.md", limit) == CONTENT[:limit]
    assert source.sha256("note.md") == hashlib.sha256(CONTENT).hexdigest()


@pytest.mark.parametrize("limit", [None, 1, len(CONTENT), 64 * 1024])
def test_a_file_is_read_to_its_end_or_the_limit(tmp_path: Path, limit: int | None) -> None:
    assert _listed(tmp_path).read("note.md", limit) == CONTENT[:limit]


def test_a_file_that_grew_after_it_was_opened_is_read_to_its_new_end(tmp_path: Path) -> None:
    path = tmp_path / "note.md"
    path.write_bytes(CONTENT)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        with path.open("ab") as appending:
            appending.write(b"appended while open\n")
        assert files._read(descriptor, len(CONTENT), None) == CONTENT + b"appended while open\n"
    finally:
        os.close(descriptor)


def test_a_file_that_shrank_after_it_was_opened_is_read_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "note.md"
    path.write_bytes(CONTENT)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.truncate(path, 10)
        assert files._read(descriptor, len(CONTENT), None) == CONTENT[:10]
    finally:
        os.close(descriptor)


# -- a scan's reads, through folder descriptors (``LocalFiles.reading``) -------------------------


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def _nested(root: Path) -> LocalFiles:
    """Files at the root, in folders and in folders named like the files between them,
    more folders than are kept open at once."""
    for name in ("a.md", "notes/2026-01.md", "notes/2026-01/detail.md", "notes/2026-02.md", "x/y/z/deep.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(name.encode() + b"\n" + CONTENT)
    for number in range(files._FOLDERS_KEPT + 3):
        (root / f"f{number}").mkdir()
        (root / f"f{number}" / "n.md").write_bytes(b"%d\n" % number + CONTENT)
    source = LocalFiles(root)
    source.walk()
    return source


@pytest.mark.parametrize("limit", [None, 10, 64 * 1024 + 1])
def test_a_scan_reading_through_folder_descriptors_reads_what_a_read_by_path_gives(
    tmp_path: Path, limit: int | None
) -> None:
    source = _nested(tmp_path)
    listed = sorted(source.walk()[0])
    by_path = {path: source.read(path, limit) for path in listed}
    before = _open_descriptors()
    with source.reading():
        through_folders = {path: source.read(path, limit) for path in [*listed, *reversed(listed)]}
        assert _open_descriptors() <= before + 1 + files._FOLDERS_KEPT
    assert through_folders == by_path
    assert _open_descriptors() == before


def test_a_file_that_grew_or_shrank_since_the_walk_is_read_to_its_end_through_its_folder(tmp_path: Path) -> None:
    source = _nested(tmp_path)
    (tmp_path / "notes" / "2026-01.md").write_bytes(CONTENT + b"grown since the walk\n")
    (tmp_path / "notes" / "2026-02.md").write_bytes(b"shrunk")
    with source.reading():
        assert source.read("notes/2026-01.md") == CONTENT + b"grown since the walk\n"
        assert source.read("notes/2026-02.md") == b"shrunk"
        assert source.read("notes/2026-01.md", 10) == CONTENT[:10]


def test_a_file_swapped_for_a_link_outside_a_folder_or_a_fifo_is_not_read_by_a_scans_reads(tmp_path: Path) -> None:
    source = _nested(tmp_path)
    secret = tmp_path.parent / f"{tmp_path.name}-outside.md"
    secret.write_text("secret\n")
    (tmp_path / "a.md").unlink()
    (tmp_path / "a.md").symlink_to(secret)
    (tmp_path / "x" / "y" / "z" / "deep.md").unlink()
    (tmp_path / "x" / "y" / "z" / "deep.md").mkdir()
    (tmp_path / "notes" / "2026-02.md").unlink()
    os.mkfifo(tmp_path / "notes" / "2026-02.md")
    with source.reading():
        with pytest.raises(files.OutsideRoot):
            source.read("a.md")
        with pytest.raises(files.NotRegular):
            source.read("x/y/z/deep.md")
        with pytest.raises(files.NotRegular):
            source.read("notes/2026-02.md")


def test_a_threads_reading_is_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads may scan one folder at once: the descriptors one keeps while it reads
    are never used, nor closed, by the other."""
    source = _nested(tmp_path)
    listed = sorted(source.walk()[0])
    expected = {path: source.read(path) for path in listed}
    through_folders: list[str] = []
    real_read = files._Folders.read

    def noted(folders: files._Folders, path: str, size: int, limit: int | None) -> bytes | None:
        through_folders.append(threading.current_thread().name)
        return real_read(folders, path, size, limit)

    monkeypatch.setattr(files._Folders, "read", noted)
    read_elsewhere: dict[str, bytes] = {}
    with source.reading():
        assert source.read(listed[0]) == expected[listed[0]]
        other = threading.Thread(target=lambda: read_elsewhere.update((path, source.read(path)) for path in listed))
        other.start()
        other.join()
        assert {path: source.read(path) for path in listed} == expected
    assert read_elsewhere == expected
    assert set(through_folders) == {threading.current_thread().name}
