"""A warm refresh does only the work a change calls for, and answers exactly as a cold one.

After a change, a refresh reuses what the cache vouches for: the declarations of
unchanged files and their resolved entries, the hashes of unchanged sources, and
the lock and cache left as they are when nothing in them changes.  The property
below replays random sequences of edits (a source edited, a declaration
rewritten, files added, deleted and renamed, cycles formed, files stamped) and,
after each step, compares the warm answer with a cold scan of a copy of the
folder made just before the step, at the same time: the same report and the
same lock bytes.
"""

from __future__ import annotations

import enum
import os
import posixpath
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scratch import scratch_folder

import provgraph.api
import provgraph.files
import provgraph.scan
import provgraph.store.state
from provgraph import Memory, NotDerived, Report
from provgraph.declarations import Lookup, follows_listing, resolve_entries

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
YEAR_NS = 365 * 24 * 3600 * 10**9
NAMES = ("alpha", "bravo", "charlie", "delta")
FOLDERS = ("", "notes/", "people/")
PATHS = tuple(f"{folder}{name}.md" for folder in FOLDERS for name in NAMES)


class Form(enum.Enum):
    """How a declaration names a source."""

    RELATIVE = "relative"
    ROOTED = "rooted"
    LINK = "link"
    WIKI_PATH = "wiki-path"
    WIKI_NAME = "wiki-name"
    """A bare ``[[name]]``: which file it means depends on which files exist."""
    NO_EXTENSION = "no-extension"
    """A typo (``.md`` left out): missing, with a hint that depends on which files exist."""


class Step(enum.Enum):
    EDIT = "edit"
    """Append to the body (a plain file is created if there is none)."""
    DECLARE = "declare"
    """Write the file anew with a declaration (none when the entries are empty)."""
    DELETE = "delete"
    RENAME = "rename"
    STAMP = "stamp"


def entry_text(declaring: str, source: str, form: Form) -> str:
    name = posixpath.basename(source)
    if form is Form.RELATIVE:
        return posixpath.relpath(source, posixpath.dirname(declaring) or ".")
    if form is Form.ROOTED:
        return "/" + source
    if form is Form.LINK:
        return f"[{name}](/{source})"
    if form is Form.WIKI_PATH:
        return f"[[{source.removesuffix('.md')}]]"
    if form is Form.WIKI_NAME:
        return f"[[{name.removesuffix('.md')}|alias]]"
    return "/" + source.removesuffix(".md")


_ENTRIES = st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(Form)), max_size=3)
_STEPS = st.lists(
    st.tuples(st.sampled_from(Step), st.sampled_from(PATHS), _ENTRIES, st.sampled_from(PATHS)), min_size=1, max_size=7
)


class Folder:
    """A memory folder that every write leaves with a new, distinct mtime."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tick = 0

    def write(self, path: str, data: bytes, when: datetime) -> None:
        full = self.root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(data)
        self.tick += 1
        seconds = int((when - timedelta(hours=1)).timestamp()) + self.tick
        os.utime(full, ns=(seconds * 10**9, seconds * 10**9))

    def apply(self, step: Step, path: str, entries: list[tuple[str, Form]], other: str, when: datetime) -> None:
        full = self.root / path
        if step is Step.EDIT:
            before = full.read_bytes() if full.is_file() else b""
            self.write(path, before + f"An edit ({self.tick}).\n".encode(), when)
        elif step is Step.DECLARE:
            self.write(path, _document(path, entries), when)
        elif step is Step.DELETE:
            full.unlink(missing_ok=True)
        elif step is Step.RENAME and full.is_file() and path != other:
            (self.root / other).parent.mkdir(parents=True, exist_ok=True)
            full.rename(self.root / other)


def _document(path: str, entries: list[tuple[str, Form]]) -> bytes:
    texts = [entry_text(path, source, form) for source, form in entries]
    head = f"---\nderived_from: [{', '.join(texts)}]\n---\n" if texts else ""
    return f"{head}Notes in {path}.\n".encode()


@contextmanager
def trusted_cache() -> Iterator[None]:
    """Let the stat cache trust every file whose metadata is unchanged (a test folder is
    always younger than the racy window), so that the warm path is the one that runs."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (provgraph.files, provgraph.scan, provgraph.api, provgraph.store.state):
            if hasattr(module, "RACY_WINDOW_NS"):
                patch.setattr(module, "RACY_WINDOW_NS", -YEAR_NS)
        yield


def _answer(memory: Memory, step: Step, path: str, when: datetime) -> Report | str:
    if step is not Step.STAMP:
        return memory.refresh(now=when)
    try:
        return memory.stamp([path], now=when)
    except NotDerived as error:
        return str(error)


def _as_if_in(root: Path, answer: Report | str) -> Report | str:
    """The answer for a copy of the folder, as the folder at ``root`` would give it."""
    return answer if isinstance(answer, str) else replace(answer, root=str(root))


@settings(max_examples=examples(60), deadline=None)
@given(_STEPS, _STEPS)
def test_a_warm_refresh_after_any_edits_answers_as_a_cold_scan_of_a_copy(setup, steps) -> None:
    with scratch_folder(prefix="provgraph-incremental-") as base, trusted_cache():
        folder = Folder(Path(base) / "memory")
        folder.root.mkdir()
        for number, (step, path, entries, other) in enumerate(setup):
            folder.apply(Step.DECLARE if step is Step.STAMP else step, path, entries, other, T0 - number * DAY)
        warm = Memory(folder.root)
        warm.refresh(now=T0)
        for number, (step, path, entries, other) in enumerate(steps, start=1):
            when = T0 + number * DAY
            folder.apply(step, path, entries, other, when)
            copy = Path(base) / f"copy-{number}"
            shutil.copytree(folder.root, copy, ignore=shutil.ignore_patterns(".provgraph"))
            answer = _answer(warm, step, path, when)
            cold = _answer(Memory(copy), step, path, when)
            assert _as_if_in(folder.root, cold) == answer, (step, path)
            lock = folder.root / "provgraph.lock"
            assert (lock.read_bytes() if lock.exists() else None) == (
                (copy / "provgraph.lock").read_bytes() if (copy / "provgraph.lock").exists() else None
            )


# -- which resolutions can be kept ------------------------------------------------------------------

_FILES = st.sets(st.sampled_from([*PATHS, "notes/deep/alpha.md", "Alpha.md", "NOTES/bravo.md"]), max_size=8)
_ENTRY = st.one_of(
    st.builds(entry_text, st.sampled_from(PATHS), st.sampled_from(PATHS), st.sampled_from(Form)),
    st.sampled_from(["", " ", "../x.md", "/etc/passwd", "https://example.org/a.md", "a/", ".provgraph/cache.json"]),
    st.text(alphabet="[]()|#/. abAB", max_size=12),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from(PATHS), st.lists(_ENTRY, max_size=3), _FILES, _FILES)
def test_only_a_declaration_with_a_wiki_link_resolves_differently_when_other_files_exist(
    declaring, entries, before, after
) -> None:
    entries = tuple(entries)
    then, now = resolve_entries(declaring, entries, Lookup(before)), resolve_entries(declaring, entries, Lookup(after))
    assert then == now or follows_listing(entries)
