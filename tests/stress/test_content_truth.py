"""Content truth: the bytes hashed are the whole file, and the cache can be distrusted.

A read may return fewer bytes than asked without the file having ended; only an
empty read is the end.  The stat cache assumes that a change of content moves the
size, mtime, ctime or inode, as git's index does; a write through ``mmap`` can
move none of them, so ``--no-cache`` (``Memory(..., trust_cache=False)``) reads
every file on every scan.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from datetime import timedelta
from pathlib import Path

import pytest

from provgraph import Memory
from provgraph import files as files_module
from provgraph.cli import cli
from provgraph.files import LocalFiles

from .helpers import NOW, OldFiles, derived, write


class _ShortReads:
    """The ``os`` module as ``files`` sees it, but every read returns at most 7 bytes."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def read(descriptor: int, size: int) -> bytes:
        return os.read(descriptor, min(size, 7))


def test_short_reads_never_cut_a_file_short(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = write(root, "facts.md", "tea, " * 1000)
    write(root, "profile.md", "---\nname: A profile with a long name\n" + derived("facts.md")[4:])
    monkeypatch.setattr(files_module, "os", _ShortReads())
    local = LocalFiles(root)
    local.walk()
    assert local.read("facts.md") == source.read_bytes()
    assert local.read("facts.md", 100) == source.read_bytes()[:100]
    assert local.sha256("facts.md") == hashlib.sha256(source.read_bytes()).hexdigest()
    memory = Memory(root)
    assert memory.refresh(now=NOW).derived == ("profile.md",)
    write(root, "facts.md", "tea, " * 999 + "milk")
    assert [entry.path for entry in memory.refresh(now=NOW + timedelta(days=1)).stale] == ["profile.md"]


def test_a_write_through_mmap_is_seen_when_the_cache_is_not_trusted(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The kernel moves mtime and ctime when a write dirties a clean page of a shared
    mapping; a second write to the same page before it is written back moves nothing."""
    facts = write(root, "facts.md", "tea\n")
    write(root, "profile.md", derived("facts.md"))
    files = OldFiles(root)  # times an hour old: the cache trusts every file
    trusting = Memory(root, files=files)
    distrusting = Memory(root, state=tmp_path / "no-cache.json", files=OldFiles(root), trust_cache=False)
    no_cache = ("status", str(root), "--no-cache", "--state", str(tmp_path / "cli.json"))
    with facts.open("r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
        mapped[:3] = b"cof"  # dirties the page: the times move
        for memory in (trusting, distrusting):
            assert not memory.refresh(now=NOW).stale
        assert cli(*no_cache) == 0
        before = files.stat("facts.md")

        mapped[:3] = b"mil"  # the same dirty page: no fault, no new times

        later = NOW + timedelta(days=1)
        assert [entry.path for entry in distrusting.refresh(now=later).stale] == ["profile.md"]
        capsys.readouterr()
        assert cli(*no_cache) == 0
        assert "profile.md" in capsys.readouterr().out.split("Stale derived files")[1]
        if files.stat("facts.md") == before:  # the limit the README states: the cache cannot see it
            assert not trusting.refresh(now=later).stale
