"""A memory file is read and hashed whole (or read up to the limit asked), whatever each
read returns.

Reading stops after one read when that read gives as many bytes as the open file
had; a short read (network and FUSE file systems, signals) or a file that grew or
shrank meanwhile is read on to its real end.
"""

from __future__ import annotations

import hashlib
import os
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
