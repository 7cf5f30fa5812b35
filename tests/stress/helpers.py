"""Tools of the stress suite: the real command in a process of its own, file sources that
misbehave on purpose, and checks that output holds no traceback and no escape."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import launch

from provgraph.files import LocalFiles
from provgraph.meaning import Meaning
from provgraph.model import FileMeta

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
"""The pinned clock of the suite (``PROVGRAPH_NOW`` for the command line)."""

TIMEOUT = 300
"""Seconds a single command may take before the test calls it a hang."""

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
"""Permission bits do not stop root: chmod-based variants are replaced by wrappers."""


@dataclass(frozen=True)
class Done:
    """A finished ``provgraph`` process."""

    code: int
    stdout: str
    stderr: str


def provgraph(*args: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None, **env: str) -> Done:
    """Run ``provgraph ARGS`` (the code under test) with the pinned clock; output must be UTF-8."""
    done = launch(args, cwd=cwd, env=environment(**env), timeout=TIMEOUT)
    return Done(done.code, done.stdout.decode("utf-8"), done.stderr.decode("utf-8"))


def environment(**extra: str) -> dict[str, str]:
    values = {key: value for key, value in os.environ.items() if key != "PROVGRAPH_NOW"}
    values.update(TZ="UTC", PROVGRAPH_NOW=NOW.isoformat(), PYTHONUTF8="1")
    values.update(extra)
    return values


def assert_clean(done: Done, *codes: int) -> None:
    """Exit code among ``codes`` and nothing on stderr that looks like a crash."""
    assert done.code in codes, (done.code, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-4000:]


def assert_one_error_line(done: Done) -> str:
    """Exit 2 and a single ``provgraph: error:`` line; returns it."""
    assert done.code == 2, (done.code, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("provgraph: error: "), done.stderr
    return lines[0]


# -- building folders ------------------------------------------------------------------------


def write(root: Path, relative: str, content: bytes | str) -> Path:
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content.encode() if isinstance(content, str) else content)
    return target


def derived(*sources: str, body: str = "derived\n") -> str:
    """A memory file declaring ``sources`` as a YAML inline list, each entry quoted."""
    entries = ", ".join(_yaml_quoted(source) for source in sources)
    return f"---\nderived_from: [{entries}]\n---\n{body}"


def _yaml_quoted(text: str) -> str:
    """A double-quoted YAML scalar holding exactly ``text`` (any character)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable() and char not in "\u2028\u2029\ufeff":
            out.append(char)
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


# -- file sources that misbehave --------------------------------------------------------------


class CountingFiles(LocalFiles):
    """Counts the bytes handed out by ``read`` and the files hashed, per path."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.bytes_read: Counter[str] = Counter()
        self.hashed: Counter[str] = Counter()

    def read(self, path: str, limit: int | None = None) -> bytes:
        data = super().read(path, limit)
        self.bytes_read[path] += len(data)
        return data

    def sha256(self, path: str, meaning: Meaning | None = None) -> str:
        self.hashed[path] += 1
        return super().sha256(path, meaning)


class MutatingFiles(LocalFiles):
    """Changes the folder in the middle of a scan: ``between`` runs once, after the
    listing and before any file is read; ``before_hash`` once, before the first hash."""

    def __init__(
        self, root: Path, between: Callable[[], None] | None = None, before_hash: Callable[[], None] | None = None
    ) -> None:
        super().__init__(root)
        self._between = between
        self._before_hash = before_hash

    def walk(self):  # noqa: ANN201 - the FileSource signature
        listing = super().walk()
        between, self._between = self._between, None
        if between is not None:
            between()
        return listing

    def sha256(self, path: str, meaning: Meaning | None = None) -> str:
        before, self._before_hash = self._before_hash, None
        if before is not None:
            before()
        return super().sha256(path, meaning)


class DenyingFiles(LocalFiles):
    """Refuses to read ``denied`` paths as a disk does for a file mode 000 and a user
    who is not root (tests run as root in CI, where chmod stops nothing)."""

    def __init__(self, root: Path, denied: set[str]) -> None:
        super().__init__(root)
        self.denied = denied

    def _refuse(self, path: str) -> None:
        if path in self.denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    def read(self, path: str, limit: int | None = None) -> bytes:
        self._refuse(path)
        return super().read(path, limit)

    def sha256(self, path: str, meaning: Meaning | None = None) -> str:
        self._refuse(path)
        return super().sha256(path, meaning)


class OldFiles(LocalFiles):
    """Reports every file as last changed an hour ago, so that the stat cache and the
    no-change fast path are used even for files the test wrote a moment ago.

    ``trusts_stat`` False turns the cache off: every file is read on every scan,
    which is what a from-scratch replay needs."""

    AGE_NS = 3600 * 10**9

    def __init__(self, root: Path, trusts_stat: bool = True) -> None:
        super().__init__(root)
        self.trusts_stat = trusts_stat

    def _aged(self, meta: FileMeta | None) -> FileMeta | None:
        if meta is None:
            return None
        return meta._replace(mtime_ns=meta.mtime_ns - self.AGE_NS, ctime_ns=meta.ctime_ns - self.AGE_NS)

    def walk(self):  # noqa: ANN201 - the FileSource signature
        listing, problems = super().walk()
        return {path: self._aged(meta) for path, meta in listing.items()}, problems

    def stat(self, path: str) -> FileMeta | None:
        return self._aged(super().stat(path))


# -- output checks --------------------------------------------------------------------------

_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def hostile_characters(text: str) -> list[str]:
    """Characters of ``text`` (lines split off) that a terminal or a model may not show
    as themselves: controls, bidi and format characters, separators, unassigned."""
    return [char for char in text.replace("\n", "") if unicodedata.category(char) in _INVISIBLE]


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Fail instead of hanging when the body runs longer than ``seconds`` (main thread only)."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_prompt_block(block: str) -> list[str]:
    """Assert that ``block`` is one intact block and return its ``- `` lines.

    Whatever the names and frontmatter values: a heading line, the opening tag,
    lines that each start with ``- `` (after the fixed instructions), the
    closing tag last, and no other tag, angle bracket or line-breaking or
    invisible character anywhere, even after Unicode normalisation (what a
    model may read fullwidth ``＜`` as)."""
    assert block.endswith("\n")
    lines = block[:-1].split("\n")
    assert lines[0].startswith("## ") and lines[1] == "<system-reminder>" and lines[-1] == "</system-reminder>"
    body = lines[2:-1]
    instructions = [line for line in body if not line.startswith("- ")]
    assert len(instructions) <= 3 and body[: len(instructions)] == instructions, body[:5]
    assert hostile_characters(block) == []
    normal = unicodedata.normalize("NFKC", block).replace(" <- ", " ")  # chains read "a <- b"
    assert normal.count("<") == 2 and normal.count(">") == 2, [line for line in body if "<" in line or ">" in line]
    assert normal.count("<system-reminder>") == 1 and normal.count("</system-reminder>") == 1
    assert all(not line.lstrip().startswith("#") for line in body)
    return body[len(instructions) :]


def deny_listing(monkeypatch: Any, folder: Path) -> None:
    """Listing ``folder`` is refused, as for mode 000 and a user who is not root, whether
    it is listed by its path (``os.scandir``) or opened first (``os.open``)."""
    scandir, open_, denied = os.scandir, os.open, os.fspath(folder)

    def refusing(path: Any = ".") -> Any:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path) == denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
        return scandir(path)

    def refusing_to_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_DIRECTORY and isinstance(path, (str, os.PathLike)) and os.fspath(path) == denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
        return open_(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", refusing)
    monkeypatch.setattr(os, "open", refusing_to_open)
