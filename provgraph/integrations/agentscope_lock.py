"""The lineage lock of a sandboxed memory folder lives in the sandbox; only the cache stays on this machine.

Every AgentScope sandbox has the same ``workdir``, so stamps kept on the host would mix
workspaces and diverge between replicas; they live in ``<memory folder>/provgraph.lock``,
the very file the command line writes.  The core reads and writes a local lock, so the host
state folder holds a *mirror* of it (``LockMirror``).  Around each transaction: the lock is
read in the listing's batch unless the listing shows it unchanged since the last exchange;
the transaction runs on the host folder; a mirror that then differs is written back through
a temporary file and one command that renames it over the lock only if the lock is still
the one mirrored (else both are merged, newer stamp of each edge, and tried once more).  A
failed write-back keeps the stamps in the mirror, with a warning, for the next check, and
removes its temporary file.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import orjson

from ..clock import wall_ns
from ..store.folder import Folders, hold, open_folder, read_file, write_file
from ..store.lock import LOCK_NAME, LockError, decode_lock, decode_options, encode_lock, merge_reads
from . import agentscope_backend as backend_files
from .agentscope_backend import IDENTITY_FIELDS, BackendError, BackendFiles

__all__ = ["LockMirror"]

_T = TypeVar("_T")
_RECORD_NAME = "workspace-lock.json"
"""In the host state folder: what the workspace's lock was at the last exchange."""
_FLOCK_NAME = "mirror.flock"
_WAIT = 60.0
"""Seconds a check waits for another one using the same host folder."""
_WRITTEN = b"provgraph-written\n"
_MOVED = b"provgraph-moved\n"
_TEMPORARY = f".{LOCK_NAME}.*.tmp"
_REMOVE_SCRIPT = 'cd -- "$1" && rm -f -- "$2"\n'
_REPLACE_SCRIPT = (
    'cd -- "$1" || exit 4\n'
    f"find . -maxdepth 1 -name '{_TEMPORARY}' -mmin +10 -delete 2>/dev/null\n"  # a write-back that died midway
    f"now=$(find {LOCK_NAME} -maxdepth 0 -printf '{IDENTITY_FIELDS}' 2>/dev/null)\n"
    'if [ "$now" != "$3" ]; then\n'
    '  rm -f -- "$2"\n'
    f"  printf 'provgraph-moved\\n%s\\n' \"$now\"\n"
    f"  case $now in f*) exec cat -- {LOCK_NAME} ;; esac\n"
    "  exit 0\n"
    "fi\n"
    f'mv -f -- "$2" {LOCK_NAME} || {{ rm -f -- "$2"; exit 6; }}\n'
    "printf 'provgraph-written\\n'\n"
    f"exec find {LOCK_NAME} -maxdepth 0 -printf '{IDENTITY_FIELDS}'\n"
)
"""Rename the temporary file ($2) over the lock if the lock still has the identity $3
(empty: no lock); else print the lock's identity and bytes, for a merge."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Exchange:
    """The workspace's lock as of the last read or write: its ``find`` identity (None without
    a shell), the sha256 of its bytes ("" for no lock), and when this was recorded."""

    identity: str | None
    sha256: str
    at_ns: int
    written: bool = False
    """This middleware wrote that lock: its identity was printed right after the rename."""


@dataclass(frozen=True, slots=True)
class _Replaced:
    """What the rename command found: the lock replaced (its new identity), or moved meanwhile."""

    written: bool
    identity: str
    data: bytes | None


class LockMirror:
    """Keeps ``<host state>/provgraph.lock`` equal to the workspace's lock around each transaction."""

    def __init__(self, files: BackendFiles, state_path: Path) -> None:
        self.files, self.state_path, self._folder = files, state_path, -1
        self._unsent: bytes | None = None
        """The stamps of a write-back that failed, merged into the lock at the next check."""
        self._synced = False
        """The mirror was made the workspace's lock in the transaction in progress."""
        files.companion = self

    def transaction(self, run: Callable[[], _T]) -> _T:
        """``run()`` (which walks the folder: ``wanted`` and ``received`` are called), then the
        write-back of what it changed, under an exclusive lock on the host folder."""
        self.state_path.mkdir(parents=True, exist_ok=True)
        folder = open_folder(self.state_path.parent, self.state_path.name, create=True)
        assert folder is not None
        try:
            held = hold(folder, _FLOCK_NAME, _WAIT)
            try:
                self._folder, self._synced = folder, False
                result = run()
                self._write_back()
                return result
            finally:
                self._folder = -1
                os.close(held)
        finally:
            os.close(folder)

    def wanted(self) -> list[str]:
        """The lock, unless the listing shows none or shows it unchanged since the last exchange."""
        identity = self.files.listed_identity(LOCK_NAME)
        if identity == "":
            return []
        if not (identity is None or identity.startswith("f")):
            raise BackendError(f"{LOCK_NAME} in {self.files.folder} is not a regular file")
        exchange = self._exchange()
        if exchange is not None and identity and identity == exchange.identity and self._settled(exchange):
            return []
        return [LOCK_NAME]

    def _settled(self, exchange: Exchange) -> bool:
        """Equal metadata proves an equal lock only when it was not modified near the time it was recorded."""
        if exchange.written:  # replaced whole by a rename, so a new inode: the identity names those bytes
            return True
        newest = self.files.newest_change_ns(LOCK_NAME)
        return newest is not None and newest < exchange.at_ns - backend_files.RACY_WINDOW_NS

    def received(self, asked: list[str]) -> None:
        """Make the mirror the workspace's lock: kept as it is when the listing shows the very
        lock of the last exchange (it may hold stamps still to be written back), else the lock
        just read, merged with the stamps not written back (never another workspace's)."""
        identity = self.files.listed_identity(LOCK_NAME)
        exchange = self._exchange()
        if not asked and identity:
            self._synced = True
            return  # unchanged since the last exchange
        data = self.files.content(LOCK_NAME) if asked else None
        if data is None and asked and identity:
            raise BackendError(f"{LOCK_NAME} in {self.files.folder} vanished while it was read")
        same = exchange is not None and identity == exchange.identity and exchange.sha256 == _sha256(data)
        if same and (identity or self._synced or (self._unsent is None and self._mirror() is None)):
            if asked and identity and exchange is not None:  # read again because it had just changed: now settled
                self._record(Exchange(identity, exchange.sha256, wall_ns()))
        else:
            self._set_mirror(data if self._unsent is None else _merged(data, self._unsent))
            self._record(Exchange(identity, _sha256(data), wall_ns()))
        self._synced = True

    def _write_back(self) -> None:
        exchange = self._exchange()
        data = self._mirror()
        if data is None or exchange is None or _sha256(data) == exchange.sha256:
            return
        try:
            self._replace(exchange, data)
            self._unsent = None
        except Exception as error:
            self._unsent = data  # the stamps stay in the mirror; the next check retries
            folder = self.files.folder
            _log.warning(
                "provgraph could not write %s in %s (the next check tries again): %s", LOCK_NAME, folder, error
            )

    def _replace(self, exchange: Exchange, data: bytes) -> None:
        if not self.files.has_shell:
            self.files.write(LOCK_NAME, data)
            self._record(Exchange(None, _sha256(data), wall_ns()))
            return
        replaced = self._rename(exchange.identity or "", data)
        if not replaced.written:  # another replica wrote meanwhile: merge, then try once more
            data = _merged(replaced.data, data)
            self._set_mirror(data)
            self._record(Exchange(replaced.identity, _sha256(replaced.data), wall_ns()))
            replaced = self._rename(replaced.identity, data)
            if not replaced.written:
                raise BackendError("the lock changed again while it was being written")
        self._record(Exchange(replaced.identity, _sha256(data), wall_ns(), written=True))

    def _rename(self, expected: str, data: bytes) -> _Replaced:
        temporary = _TEMPORARY.replace("*", secrets.token_hex(6))
        try:
            self.files.write(temporary, data)
            output = self.files.run_script(_REPLACE_SCRIPT, temporary, expected)
        except Exception:
            with contextlib.suppress(Exception):  # else the next write-back removes it once it is old
                self.files.run_script(_REMOVE_SCRIPT, temporary)
            raise
        if output.startswith(_WRITTEN):
            return _Replaced(True, output[len(_WRITTEN) :].decode("utf-8", "replace"), None)
        if output.startswith(_MOVED):
            identity, _, rest = output[len(_MOVED) :].partition(b"\n")
            now = identity.decode("utf-8", "replace")
            if now and not now.startswith("f"):
                raise BackendError(f"{LOCK_NAME} in {self.files.folder} is not a regular file")
            return _Replaced(False, now, rest if now else None)
        raise BackendError(f"replacing {LOCK_NAME} in {self.files.folder} did not complete")

    def _mirror(self) -> bytes | None:
        return read_file(self._folder, LOCK_NAME, self.state_path)

    def _set_mirror(self, data: bytes | None) -> None:
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(LOCK_NAME, dir_fd=self._folder)
        elif data != self._mirror():
            self._write(LOCK_NAME, data)

    def _exchange(self) -> Exchange | None:
        try:
            fields = orjson.loads(read_file(self._folder, _RECORD_NAME, self.state_path) or b"null")
            if fields is None:
                return None
            return Exchange(fields["identity"], fields["sha256"], fields["at_ns"], fields.get("written") is True)
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None  # unknown: the lock is read again

    def _record(self, exchange: Exchange) -> None:
        self._write(_RECORD_NAME, orjson.dumps(asdict(exchange)))

    def _write(self, name: str, data: bytes) -> None:
        folders = Folders(self._folder, self._folder, self.state_path, self.state_path)
        write_file(folders, self._folder, name, [data])


def _sha256(data: bytes | None) -> str:
    return "" if data is None else hashlib.sha256(data).hexdigest()


def _merged(theirs: bytes | None, ours: bytes) -> bytes:
    """Both locks as one: for each edge the newer stamp.  A lock that cannot be read loses
    to ours (the core sets such a lock aside when it reads it)."""
    if theirs is None:
        return ours
    try:
        read = decode_lock(theirs)
    except LockError:
        return ours
    merged = merge_reads(decode_lock(ours), [read])
    return encode_lock(merged.records.values(), decode_options(ours))
