"""A memory folder read through an AgentScope backend (a Docker, E2B or bubblewrap sandbox, a custom store).

Every backend call is a round trip, so with a POSIX shell one ``find`` lists the whole
folder with each file's stat, and one ``tar`` reads every file whose stat is not the one the
cache records (``expect``: what a check learned outlives the middleware; no cache, every
file, in one call whatever their number); without
one, files are read one by one through ``list_dir``/``read_file``.  Whether it has one is
what the backend is: a shell that listed the folder once is used on every check, a failed
call (exit status 127 at spawn under load, a timeout) abandoning its check only; one that
never did is given up after three "no shell" answers.  A listing counts only when it ends
with its end marker (else ``BackendError``: a folder taken for empty would forget every
stamp); every call has a deadline; only regular files are read.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import tarfile
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from agentscope.tool import BackendBase, ExecResult

from ..errors import ProvgraphError
from ..files import RACY_WINDOW_NS, NotRegular
from ..model import FileMeta, Problem, ProblemKind, as_text, is_utf8

__all__ = ["DEFAULT_BACKEND_TIMEOUT", "IDENTITY_FIELDS", "RACY_WINDOW_NS", "BackendError", "BackendFiles", "Companion"]

DEFAULT_BACKEND_TIMEOUT = 10.0
"""Seconds one backend call may take before the check is abandoned (prompt unchanged, a warning)."""

_T = TypeVar("_T")
Expected = tuple[Mapping[str, tuple[int, int, int, int]], int]
"""What the last scan saw: each memory file's (size, mtime, ctime, inode), and its racy mark in nanoseconds."""
_END = "provgraph-end"
IDENTITY_FIELDS = "%y\\t%s\\t%T@\\t%C@\\t%i"
"""How ``find -printf`` prints an entry's type, size, times and inode: what tells one file from another."""
_FIELDS = IDENTITY_FIELDS + "\\t%P\\0"
_LIST_SCRIPT = (  # list the folder (hidden entries pruned), then an end marker with find's status
    'cd -- "$1" 2>/dev/null || { [ -e "$1" ] && exit 3; exit 4; }\n'
    f"find . -mindepth 1 -name '.*' -prune -o -printf '{_FIELDS}'\n"
    f"printf '{_END}\\t%s\\0' \"$?\"\n"
)
_STAT_SCRIPT = f"cd -- \"$1\" && shift && find \"$@\" -maxdepth 0 -printf '{_FIELDS}'; printf '{_END}\\t0\\0'\n"
_READ_SCRIPT = 'cd -- "$1" && shift && exec tar -cf - "$@"\n'
_READ_ALL_SCRIPT = (  # every visible *.md file and the names given, however many: no argument limit
    "cd -- \"$1\" && shift && { find . -mindepth 1 -name '.*' -prune -o -type f -name '*.md' -print0; "
    "for name; do printf '%s\\0' \"$name\"; done; } | tar --null -T - -cf -\n"
)
_MISSING_FOLDER = 4
_NO_SHELL = (126, 127)
_NO_SHELL_PROBES = 3  # "no shell" answers, with no listing through it ever, that make a backend shell-less
_ARGUMENT_BYTES = 100_000  # paths passed to one read command at most: far below any system's limit
_CONCURRENCY = 16  # per-file calls in flight at once for a backend without a shell


class Companion(Protocol):
    """Something read with the folder, in the same batch (the lineage lock, see ``agentscope_lock``)."""

    def wanted(self) -> list[str]:
        """Names to read along with the files that changed, asked after the listing."""

    def received(self, asked: list[str]) -> None:
        """Called once ``asked`` (what ``wanted`` returned) was read: see ``content``."""


class BackendError(ProvgraphError):
    """The backend failed in a way that says nothing about one file (a lost connection, a timeout)."""


class BackendFiles:
    """A provgraph ``FileSource`` over an AgentScope backend, used from a worker thread: each
    call runs on the agent's event loop (``loop``) for at most ``timeout`` seconds (``calls``
    counts them).  With a shell an unchanged file is trusted as on a local disk
    (``trusts_stat``); without one, every file is read on every scan.  A missing file, a
    folder or a refused permission is a problem of that file; any other failure raises
    ``BackendError`` and abandons the scan (else the files it hit would lose their stamps).
    """

    def __init__(
        self,
        backend: BackendBase,
        folder: str,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        timeout: float = DEFAULT_BACKEND_TIMEOUT,
    ) -> None:
        self.backend, self.folder, self.loop, self.timeout = backend, folder, loop, timeout
        self.calls = 0
        self.trusts_stat = self.has_shell = True
        self._shell_listed = False
        """A listing through the shell succeeded once: a later "no shell" answer is a failed call."""
        self._no_shell_answers = 0
        self._a_listed_file: str | None = None
        """A file the last listing without a shell found: an empty listing while it exists is a failure."""
        self._prefix = backend.join_path(backend.normpath(folder), "")
        self._content: dict[str, bytes] = {}
        self._misses = 0
        """Files read since the last ``walk`` that its batch had not read."""
        self._listed: dict[str, tuple[str, FileMeta]] = {}
        self._expected: Expected | None = None
        self._records: list[bytes] = []
        self.companion: Companion | None = None

    def expect(self, known: Expected | None) -> None:
        """What the last scan saw (each memory file's stat, and the racy mark before which an
        equal stat vouches for a file): the next ``walk`` reads, in one batch, exactly the files
        that the scan will want; without it (no cache), every file."""
        self._expected = known

    def walk(self) -> tuple[dict[str, FileMeta], list[Problem]]:
        self.forget()
        expected, self._expected = self._expected, None
        self.has_shell = self.trusts_stat = self._no_shell_answers < _NO_SHELL_PROBES
        listed = self._run(self._list_with_shell) if self.has_shell else None
        if listed is None:
            self.has_shell = self.trusts_stat = False
            self._no_shell_answers += 1
            walked = self._run(self._walk_file_by_file)
            self._read_companion([])
            return walked
        self._listed = listed
        found = {path: meta for path, (kind, meta) in listed.items() if kind == "f" and _is_memory_file(path)}
        self._read_companion(_worth_reading(found, expected))
        return found, _undecodable(listed)

    def stat(self, path: str) -> FileMeta | None:
        listed = (
            self._listed.get(path) if self.has_shell and not _hidden(path) else self._run(lambda: self._stat_one(path))
        )
        if listed is not None and listed[0] != "f":
            raise NotRegular(path)
        return None if listed is None else listed[1]

    def read(self, path: str, limit: int | None = None) -> bytes:
        content = self._content.get(path)
        if content is None:
            if self.stat(path) is None:
                raise FileNotFoundError(f"{path} does not exist in the backend")
            self._run(lambda: self._read_many(self._missed(path)))
            content = self._content.get(path)
            if content is None:
                raise FileNotFoundError(f"{path} vanished from the backend")
        return content if limit is None else content[:limit]

    def forget(self) -> None:
        """Drop the bytes kept since the last ``walk``."""
        self._content.clear()
        self._misses = 0

    def _missed(self, path: str) -> list[str]:
        """What to read for ``path``, which the listing's batch did not read: from the second such
        file on, with every listed memory file not read yet (a scan that hashes every file, for a
        source gone missing, would otherwise cost a call per file)."""
        self._misses += 1
        if self._misses < 2 or not self.has_shell:
            return [path]
        unread = (name for name, (kind, _) in self._listed.items() if kind == "f" and name not in self._content)
        return [path, *(name for name in unread if name != path and _is_memory_file(name))]

    def listed_identity(self, name: str) -> str | None:
        """A top-level entry's type, size, times and inode as the last listing printed them;
        "" when the listing has no such entry; None without a shell (nothing is known)."""
        if not self.has_shell:
            return None
        suffix = b"\t" + name.encode()
        for record in self._records:
            if record.endswith(suffix) and record.count(b"\t") == 5:
                return record[: -len(suffix)].decode("utf-8", "replace")
        return ""

    def newest_change_ns(self, name: str) -> int | None:
        """The later of a listed entry's mtime and ctime, in the sandbox's clock."""
        listed = self._listed.get(name)
        return None if listed is None else max(listed[1].mtime_ns, listed[1].ctime_ns)

    def content(self, name: str) -> bytes | None:
        """The bytes of ``name`` read since the last ``walk``, if it was read and exists."""
        return self._content.get(name)

    def write(self, name: str, data: bytes) -> None:
        """Write ``name`` in the folder through the backend's own write call."""
        self._run(lambda: self._call(self.backend.write_file(self._full(name), data)))

    def run_script(self, script: str, *arguments: str) -> bytes:
        """The output of a shell script run with the folder as ``$1`` (``BackendError`` if it fails)."""
        result = self._run(lambda: self._sh(script, *arguments))
        if result.exit_code != 0:
            raise BackendError(f"a command in {self.folder} failed ({_why(result)})")
        return result.stdout

    def _read_companion(self, changed: list[str]) -> None:
        """Read the files that changed and what the companion asks for, in one batch."""
        asked = self.companion.wanted() if self.companion is not None else []
        if self.has_shell:
            self._run(lambda: self._read_many(changed + asked))
        elif asked:
            self._run(lambda: self._read_without_shell(asked))
        if self.companion is not None:
            self.companion.received(asked)

    async def _list_with_shell(self) -> dict[str, tuple[str, FileMeta]] | None:
        """Every entry under the folder by relative path, or None when the backend has no usable shell."""
        result = await self._sh(_LIST_SCRIPT)
        if result.exit_code == _MISSING_FOLDER:
            raise FileNotFoundError(f"memory folder {self.folder} does not exist in the backend")
        records = result.stdout.split(b"\0")
        self._records = records[:-2]
        status = _end_status(records)
        if status is None:
            if result.exit_code in _NO_SHELL and not self._shell_listed:
                return None
            raise BackendError(f"listing {self.folder} did not complete ({_why(result)})")
        entries = _entries(records[:-2])
        if status != 0:
            if not entries and not self._shell_listed:
                return None  # a find without -printf (BusyBox): list file by file instead
            raise BackendError(f"listing {self.folder} failed: {_why(result)}")
        self._shell_listed = True
        return entries

    async def _stat_one(self, path: str) -> tuple[str, FileMeta] | None:
        if self.has_shell:
            result = await self._sh(_STAT_SCRIPT, "./" + path)
            records = result.stdout.split(b"\0")
            if _end_status(records) is not None:
                return _entries(records[:-2]).get(path)
            if result.exit_code not in _NO_SHELL:
                raise BackendError(f"looking at {path} did not complete ({_why(result)})")
        meta = await self._fetch(path)  # without a shell: read it
        return None if meta is None else ("f", meta)

    async def _read_many(self, paths: list[str]) -> None:
        """Read files in one call (every memory file at once when the names do not fit in one
        command), keeping regular files only."""
        batches = list(_batches(paths))
        others = [path for path in paths if not _is_memory_file(path)]  # the lock: the find does not select it
        if len(batches) > 1 and self.has_shell and await self._read_all(others):
            return
        for batch in batches:
            if self.has_shell:
                result = await self._sh(_READ_SCRIPT, *("./" + path for path in batch))
                if result.exit_code not in _NO_SHELL:
                    self._content.update(_regular_members(result, self.folder))
                    continue
            await self._read_without_shell(batch)

    async def _read_all(self, also: list[str]) -> bool:
        """Read every visible memory file and ``also`` in one call; False when the shell's ``tar``
        cannot take names from its input (then the names go as arguments)."""
        result = await self._sh(_READ_ALL_SCRIPT, *("./" + path for path in also))
        if result.exit_code >= 0 and not result.stdout:
            return False
        self._content.update(_regular_members(result, self.folder))
        return True

    async def _walk_file_by_file(self) -> tuple[dict[str, FileMeta], list[Problem]]:
        entries = await self._call(self.backend.list_dir(self.folder, recursive=True))
        paths = sorted({path for path in map(self._relative, entries) if path is not None})
        if not paths:
            await self._confirm_empty()
        fetched = await _gather_bounded([self._fetch(path) for path in paths])
        found: dict[str, FileMeta] = {}
        problems: list[Problem] = []
        for path, outcome in zip(paths, fetched, strict=True):
            if isinstance(outcome, NotRegular):
                continue
            if isinstance(outcome, PermissionError):
                problems.append(Problem(path, ProblemKind.UNREADABLE, outcome.strerror or "permission denied"))
            elif isinstance(outcome, BaseException):
                raise outcome
            elif outcome is None:
                problems.append(Problem(path, ProblemKind.UNREADABLE, "vanished during the scan"))
            else:
                found[path] = outcome
        self._a_listed_file = next(iter(found), None)
        return found, problems

    async def _confirm_empty(self) -> None:
        """An empty listing counts when the folder exists, a plain listing is empty too, and a
        file the last listing found is gone (``list_dir`` answers a failed listing with [])."""
        if not await self._call(self.backend.is_dir(self.folder)):
            raise FileNotFoundError(f"memory folder {self.folder} does not exist in the backend")
        known = self._a_listed_file
        if await self._call(self.backend.list_dir(self.folder)) or (
            known is not None and await self._call(self.backend.file_exists(self._full(known)))
        ):
            raise BackendError(f"listing {self.folder} came back empty, but the folder is not")

    async def _read_without_shell(self, paths: Iterable[str]) -> None:
        for outcome in await _gather_bounded([self._fetch(path) for path in paths]):
            if isinstance(outcome, BackendError):
                raise outcome

    async def _fetch(self, path: str) -> FileMeta | None:
        """Read one file and its mtime; None when it does not exist."""
        full = self._full(path)
        try:
            content = await self._call(self.backend.read_file(full))
            mtime = await self._call(self.backend.stat_mtime(full))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            raise NotRegular(path) from None
        except PermissionError:
            raise
        except OSError as error:
            raise BackendError(f"reading {full}: {error}") from error
        self._content[path] = content
        mtime_ns = 0 if mtime is None else int(mtime * 1_000_000_000)
        return FileMeta(len(content), mtime_ns, 0, 0)

    def _relative(self, entry: str) -> str | None:
        """A listed entry as a root-relative POSIX path; None unless it is a visible ``*.md`` file."""
        path = self.backend.normpath(entry)
        if path.startswith(self._prefix):
            path = path[len(self._prefix) :]
        elif self.backend.isabs(path):
            return None
        if self.backend.os_name == "nt":
            path = path.replace("\\", "/")
        return path if _is_memory_file(path) else None

    def _full(self, path: str) -> str:
        return self.backend.join_path(self.folder, *path.split("/"))

    async def _sh(self, script: str, *arguments: str) -> ExecResult:
        """Run a shell script in the backend with the folder as ``$1``."""
        command = ["sh", "-c", script, "sh", self.folder, *arguments]
        return await self._call(self.backend.exec_shell(command, timeout=self.timeout))

    async def _call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """One backend call, abandoned at the deadline even if the backend ignores cancellation."""
        self.calls += 1
        task = asyncio.ensure_future(coroutine)
        done, _ = await asyncio.wait({task}, timeout=self.timeout)
        if not done:
            task.cancel()
            raise BackendError(f"the backend did not answer within {self.timeout:g} s")
        return task.result()

    def _run(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run ``make()`` (a coroutine) on the agent's loop from the worker thread, and wait for it."""
        loop = self.loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            raise RuntimeError("BackendFiles must be used from a worker thread with the agent's event loop set")
        return asyncio.run_coroutine_threadsafe(make(), loop).result()


def _worth_reading(found: dict[str, FileMeta], expected: Expected | None) -> list[str]:
    """The files the scan will read: those whose stat is not the last scan's, or is too recent to vouch for them."""
    if expected is None:
        return list(found)
    known, racy_from_ns = expected
    return [
        path
        for path, meta in found.items()
        if known.get(path) != meta or max(meta.mtime_ns, meta.ctime_ns) >= racy_from_ns
    ]


def _end_status(records: list[bytes]) -> int | None:
    """find's exit status from the end marker, or None when the output has no marker (cut short)."""
    if len(records) < 2 or records[-1] != b"":
        return None
    name, _, status = records[-2].decode("ascii", "replace").partition("\t")
    return int(status) if name == _END and status.isdigit() else None


def _entries(records: Iterable[bytes]) -> dict[str, tuple[str, FileMeta]]:
    entries = {}
    for record in records:
        fields = record.decode("utf-8", "surrogateescape").split("\t", 5)
        if len(fields) != 6:
            raise BackendError("the listing is not in the expected format")
        kind, size, mtime, ctime, inode, path = fields
        entries[path] = (kind, FileMeta(int(size), _ns(mtime), _ns(ctime), int(inode)))
    return entries


def _ns(seconds: str) -> int:
    """``find``'s ``%T@`` (``1700000000.1234567890``) as integer nanoseconds, without float rounding."""
    whole, _, fraction = seconds.partition(".")
    return int(whole) * 1_000_000_000 + int((fraction + "000000000")[:9])


def _regular_members(result: Any, folder: str) -> dict[str, bytes]:
    """The regular files in a tar stream; anything else in it is never read."""
    if result.exit_code < 0:
        raise BackendError(f"reading files in {folder} did not complete ({_why(result)})")
    try:
        with tarfile.open(fileobj=io.BytesIO(result.stdout), mode="r:") as archive:
            return {  # a regular member always has a file: only other kinds give None
                posixpath.normpath(member.name): archive.extractfile(member).read()  # type: ignore[union-attr]
                for member in archive
                if member.isreg()
            }
    except (tarfile.TarError, OSError) as error:
        raise BackendError(f"reading files in {folder} failed ({_why(result)}): {error}") from error


def _undecodable(listed: dict[str, tuple[str, FileMeta]]) -> list[Problem]:
    problems = []
    for path, (kind, _) in listed.items():
        if kind == "f" and path.endswith(".md") and not is_utf8(path):
            problems.append(Problem(as_text(path), ProblemKind.UNREADABLE, "its name is not valid UTF-8"))
    return problems


def _is_memory_file(path: str) -> bool:
    return path.endswith(".md") and not _hidden(path) and is_utf8(path)


def _hidden(path: str) -> bool:
    return any(not part or part.startswith(".") for part in path.split("/"))


def _batches(paths: list[str]) -> Iterable[list[str]]:
    batch: list[str] = []
    size = 0
    for path in paths:
        if batch and size + len(path) > _ARGUMENT_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(path)
        size += len(path) + 3
    if batch:
        yield batch


def _why(result: Any) -> str:
    first = result.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
    return f"exit code {result.exit_code}" + (f": {first[0]}" if first else "")


async def _gather_bounded(coroutines: list[Coroutine[Any, Any, _T]]) -> list[_T | BaseException]:
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def bounded(coroutine: Coroutine[Any, Any, _T]) -> _T:
        async with limit:
            return await coroutine

    return await asyncio.gather(*(bounded(coroutine) for coroutine in coroutines), return_exceptions=True)
