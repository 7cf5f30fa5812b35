"""The command line's quick answer: an unchanged folder is answered with what the last
full run of the same command printed, before the rest of provgraph is even imported.

A run of ``status``, ``status --json`` or ``check`` that saved its state writes,
beside the cache, a small record (``answer-<command>``): the command as it was
read (root, ``--state``, ``--sources-heading``, the time zone), the no-change
rule's ``Conditions`` of the state it saved or reused, and the text it printed
with its exit code (``status --json`` with its
``scanned_at`` left out, to be filled with the real now).  The next run of that
command looks at the folder exactly as a refresh does (``walk.walk_in_two``, the walk of
``walk.walk_in_order`` shared with a child on a large folder), and when
``nochange.holds`` says that a refresh would reuse that very result, prints
the record's text: the bytes the full path would print, with the same exit
code and nothing on stderr.  That first quick answer also keeps, in the record,
the walk it proved as bytes in the walk's order (the *proof*); the next ones
compare their walk with it (``nochange.holds_as_proven``): no mapping, no sort,
no hash.  Anything else (another command, an option this
module does not know, a missing or damaged record, a held lock, a doubt of any
kind) returns None, and the full path answers.
"""

from __future__ import annotations

import gc
import os
import sys
import time

from .clock import BadClock, now_text, pinned_now, wall_ns
from .nochange import (
    LOCK_NAME,
    Conditions,
    Glance,
    InOrder,
    LockSeal,
    Sight,
    Watched,
    holds_as_proven,
    holds_in_order,
    is_sync_copy,
    lock_as_sealed,
    numbers_bytes,
    renewed_seal,
)
from .walk import hand_over, sight, walk_in_two

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from .walk import Walked

__all__ = ["RECORD_NAMES", "Command", "answer", "parse", "record"]

FORMAT = b"provgraph-answer 3"
RECORD_PREFIX = "answer-"
RECORD_NAMES = frozenset(RECORD_PREFIX + name for name in ("status", "status-json", "check", "check-allow-broken"))
"""The records a state folder may hold, one per covered command."""
STATE_DIR = ".provgraph"
FLOCK_NAME = "flock"
ROOT_NAME = "root"
SCANNED_AT = '\n  "scanned_at": "'
"""Where ``status --json`` writes its clock (the third key: version and root come first;
inside a JSON string a quote is escaped, so these bytes mark the key itself)."""
DEFAULT_HEADING = "## Sources"
"""What ``--sources-heading`` alone means (``api.DEFAULT_SOURCES_HEADING``)."""
Chunk = bytes | memoryview
"""Bytes to print: the stored text is printed from where it lies in the record."""
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class Command:
    """A command line the quick answer covers, read as the full path reads it."""

    __slots__ = ("heading", "name", "root", "state")

    def __init__(self, name: str, root: str, state: str | None, heading: str | None) -> None:
        self.name = name
        """``status``, ``status --json``, ``check`` or ``check --allow-broken``."""
        self.root = root
        self.state = state
        self.heading = heading

    def key(self) -> bytes:
        """Everything the printed text depends on besides the folder: where it is, how it
        is read, and the time zone its days are shown in.  (The text is written through
        ``sys.stdout`` as the full path writes it, so the output's encoding applies alike.)"""
        root, state = os.path.abspath(self.root), None if self.state is None else os.path.abspath(self.state)
        parts = (
            self.name,
            root,
            os.path.realpath(root),
            _optional(state),
            _optional(None if state is None else os.path.realpath(state)),
            _optional(self.heading),
            _optional(os.environ.get("TZ")),
            _optional(os.environ.get("TZDIR")),
            repr((time.tzname, time.timezone, time.altzone, time.daylight, _zone_file())),
        )
        return "\0".join(parts).encode("utf-8", "surrogateescape")

    def state_path(self) -> str:
        return os.path.join(self.root, STATE_DIR) if self.state is None else self.state

    def lock_folder(self) -> str:
        return self.root if self.state is None else self.state


def _optional(text: str | None) -> str:
    return "\1" if text is None else "=" + text


def _zone_file() -> tuple[int, int, int] | None:
    """The system's time zone file, by identity: replaced, it may give other days."""
    try:
        info = os.stat("/etc/localtime")
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


# -- reading the command line -----------------------------------------------------


def parse(args: Sequence[str]) -> Command | None:
    """The command ``args`` ask for, when this module covers it exactly; else None.

    Only the spelling the help shows is accepted (no abbreviation, no ``--``), so
    that argparse would read the same thing; anything unknown goes to the full path."""
    if not args or args[0] not in ("status", "check"):
        return None
    flag = "--json" if args[0] == "status" else "--allow-broken"
    options: dict[str, str | None] = {"flag": None, "root": None, "state": None, "heading": None}
    rest = list(args[1:])
    while rest:
        if not _take(rest, flag, options):
            return None
    heading = options["heading"]
    if heading is not None and not heading.lstrip().startswith("#"):
        return None  # the full path says why, in one line
    root = options["root"] or "."
    if root.startswith("~") or options["state"] == "":
        return None
    name = args[0] + ("" if options["flag"] is None else " " + flag)
    return Command(name, root, options["state"], heading)


def _take(rest: list[str], flag: str, options: dict[str, str | None]) -> bool:
    """Read the first token of ``rest`` into ``options``; False for one not covered."""
    token = rest.pop(0)
    if token == flag:
        options["flag"] = flag
    elif token == "--state" and rest and not rest[0].startswith("-"):
        options["state"] = rest.pop(0)
    elif token.startswith("--state="):
        options["state"] = token.removeprefix("--state=")
    elif token.startswith("--sources-heading="):
        options["heading"] = token.removeprefix("--sources-heading=")
    elif token == "--sources-heading" and (not rest or rest[0].startswith("--")):
        options["heading"] = DEFAULT_HEADING
    elif not token.startswith("-") and options["root"] is None:
        options["root"] = token
    else:
        return False
    return True


# -- answering ------------------------------------------------------------------


def answer(args: Sequence[str]) -> int | None:
    """Print the stored answer of ``args`` and return its exit code, or None (nothing
    printed) when the full path must answer."""
    command = parse(args)
    if command is None or not _clock_readable():
        return None
    try:
        state = os.open(command.state_path(), _DIRECTORY)
    except FileNotFoundError:
        _first_scan(command)
        return None
    except OSError:
        return None
    collecting = gc.isenabled()
    gc.disable()  # a walk's objects all live until the answer is printed: collecting finds nothing
    try:
        found = _check(command, state)
    except (OSError, ValueError, IndexError):
        found = None  # a damaged record: the full path answers (and the next run rewrites it)
    finally:
        os.close(state)
        if collecting:
            gc.enable()
    if found is None:
        return None
    return _print(*found)


def _first_scan(command: Command) -> None:
    """No state yet: the folder walked here, for the full run to take over, and, for a
    large one, a child forked to read part of it while the full run imports the rest of
    provgraph (``splitread``): here, the heap is still small for both processes to share.
    (``splitread`` is imported only here: an unchanged folder's answer never needs it.)"""
    from .splitread import start

    collecting = gc.isenabled()
    gc.disable()
    try:
        root, real_root, started_ns, walked = _walked(command)
        hand_over(root, real_root, started_ns, walked)
        start(root, started_ns, walked, command.heading)
    finally:
        if collecting:
            gc.enable()


def _walked(command: Command) -> tuple[str, str, int, Walked]:
    """The command's folder (as named, and resolved) walked now, and when the walk began
    (the real clock): what a full run takes over (``walk.hand_over``) when this answer
    cannot answer."""
    root = os.path.abspath(command.root)
    real_root = os.path.realpath(root)
    started_ns = wall_ns()
    return root, real_root, started_ns, walk_in_two(root, real_root)


def _clock_readable() -> bool:
    """A ``PROVGRAPH_NOW`` the full path would refuse is its error to report."""
    try:
        pinned_now()
    except BadClock:
        return False
    return True


def _check(command: Command, state: int) -> tuple[Chunk, Chunk | None, int] | None:
    """The stored text (split around ``scanned_at`` for ``status --json``) and exit code,
    when the record is this command's and the no-change rule holds under the lock."""
    data = _read(state, _name(command))
    if data is None:
        return None
    fields = _Fields(data)
    if len(fields) < 5 or fields[0] != FORMAT or fields[1] != command.key():
        return None
    if command.state is not None and not _state_of(state, command, fields[2]):
        return None
    code, parts = int(fields[3]), int(fields[4])
    if parts not in (1, 2) or not all(map(fields.whole_text, range(5, 5 + parts))):
        return None
    before, after = fields.view(5), fields.view(6) if parts == 2 else None
    known, proof = fields[5 + parts], fields[6 + parts]
    conditions = _decode_conditions(fields.tail(7 + parts))
    flock = _try_lock(state)
    if flock is None:
        return None
    try:
        held = _holds(command, conditions, known[1:] if known.startswith(b"=") else None, proof)
        if held is None:
            return None
        _keep(command, state, fields, 5 + parts, *held, proven=bool(proof))
    finally:
        os.close(flock)
    return before, after, code


def _keep(
    command: Command,
    state: int,
    record: _Fields,
    at: int,
    listing: bytes,
    renewed: LockSeal | None,
    *,
    proven: bool,
) -> None:
    """Rewrite the record (whose fields from ``at`` are the lock's bytes, the proof and the
    conditions) with what this answer learnt: the walk it proved, when the record had no
    proof yet, and the seal of a lock it had to read that is now old enough for its
    metadata to prove it (its bytes are then no longer kept)."""
    if proven and renewed is None:
        return
    fields = record.tail(0)
    fields[at + 1] = listing
    if renewed is not None:
        fields[at], fields[at + 2] = b"", _encode_seal(renewed)
    _write_record(command, state, command.state_path(), fields)


def _state_of(state: int, command: Command, recorded: bytes) -> bool:
    """A ``--state`` folder still records the root it recorded when the answer was saved,
    and that is still this root (``state.StateStore`` refuses another one)."""
    return (
        bool(recorded)
        and _read(state, ROOT_NAME) == recorded
        and os.path.realpath(os.fsdecode(recorded)) == os.path.realpath(os.path.abspath(command.root))
    )


def _try_lock(state: int) -> int | None:
    """The root's exclusive lock, taken without waiting: a refresh that finds it held
    waits, then warns, and that is the full path's to do."""
    import fcntl

    try:
        descriptor = os.open(FLOCK_NAME, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=state)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


def _holds(
    command: Command, conditions: Conditions, known: bytes | None, proof: bytes
) -> tuple[bytes, LockSeal | None] | None:
    """When the no-change rule holds: the walk's listing as bytes (``numbers_bytes`` in the
    walk's order), and the lock's renewed seal if it earned one; else None.  With a
    ``proof`` (the bytes of a walk the rule held for, kept in the record) the listing is
    compared with it; else the rule is applied in full, and the bytes returned become
    the record's proof (made only then: a change run never needs them)."""
    root, real_root, started_ns, (paths, numbers, problems) = _walked(command)
    rows, listing = tuple(sorted(set(problems))), b""
    renewed: list[LockSeal] = []

    def lock_holds(seal: LockSeal | None) -> bool:
        return _lock_holds(command, seal, known, renewed.append)

    def sight_of(path: str) -> Watched | None:
        return sight(root, real_root, path)

    if proof:
        listing = numbers_bytes(paths, numbers)
        held = holds_as_proven(conditions, Glance(listing, rows, conditions.settings), proof, lock_holds, sight_of)
    else:
        held = holds_in_order(conditions, InOrder(paths, numbers, rows, conditions.settings), lock_holds, sight_of)
        listing = numbers_bytes(paths, numbers) if held else listing
    if not held:  # the full run that follows takes this walk over rather than walking again
        hand_over(root, real_root, started_ns, (paths, numbers, problems))
        return None
    return listing, renewed[0] if renewed else None


def _lock_holds(
    command: Command, seal: LockSeal | None, known: bytes | None, renew: Callable[[LockSeal], object]
) -> bool:
    """``state.StateStore.lock_unchanged``, from the lock's folder opened as it opens it:
    the root through any link, a ``--state`` folder never through one.  ``known``: the
    lock's bytes as the record holds them, checked against the seal when it was written.
    A lock that held by its bytes and is now old enough gets a new seal (``renew``)."""
    import stat

    looked_ns = wall_ns()
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC if command.state is None else _DIRECTORY
    descriptor = os.open(command.lock_folder(), flags)
    try:
        if any(map(is_sync_copy, os.listdir(descriptor))):
            return False
        try:
            info = os.stat(LOCK_NAME, dir_fd=descriptor, follow_symlinks=False)
        except FileNotFoundError:
            return lock_as_sealed(seal, None, lambda: None)
        if not stat.S_ISREG(info.st_mode):
            return False
        meta = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
        if not lock_as_sealed(seal, meta, lambda: _read(descriptor, LOCK_NAME), known):
            return False
    finally:
        os.close(descriptor)
    renewed = renewed_seal(seal, meta, looked_ns)
    if renewed is not None:
        renew(renewed)
    return True


def _print(before: Chunk, after: Chunk | None, code: int) -> int:
    """The stored text on stdout, as the full path's ``sys.stdout.write`` would put it there,
    written from where it lies in the record."""
    chunks = [before] if after is None else [before, now_text().encode(), after]
    try:
        _write(chunks)
    except BrokenPipeError:
        # the reader went away (`provgraph status | head`), as the full path says it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


def _write(chunks: list[Chunk]) -> None:
    """Straight to the byte stream when the text stream would encode to the same bytes
    (UTF-8, as the record holds it), saving a copy, a decoding and an encoding of a large
    answer."""
    import codecs

    stdout = sys.stdout
    encoding = getattr(stdout, "encoding", None)
    if encoding and codecs.lookup(encoding).name == "utf-8" and hasattr(stdout, "buffer"):
        stdout.flush()
        stdout.buffer.writelines(chunks)
        stdout.buffer.flush()
    else:
        stdout.write(b"".join(chunks).decode())
        stdout.flush()


# -- the record -------------------------------------------------------------------


def record(
    command: Command, state_path: str, conditions: Conditions, text: str, code: int, lock: bytes | None = None
) -> None:
    """Write the answer ``text`` (with exit ``code``) of ``command`` for ``conditions``
    beside the cache, replacing the last one; quietly nothing when it cannot be written
    (it only saves time: the full path answers without it).  Its proof is left empty:
    the first quick answer that applies the rule in full keeps the walk it proved.
    ``lock``: the bytes of the lock the conditions' seal was made for, when the caller
    knows them to have its sha256 (``state.StateStore.known_lock``); else they are read."""
    parts = _parts(command, text)
    if parts is None:
        return
    try:
        state = os.open(state_path, _DIRECTORY)
    except OSError:
        return
    try:
        root = (_read(state, ROOT_NAME) or b"") if command.state is not None else b""
        fields = [FORMAT, command.key(), root, b"%d" % code, b"%d" % len(parts), *parts]
        fields += [_sealed_lock(command, conditions, lock), b"", *_encode_conditions(conditions)]
        _write_record(command, state, state_path, fields)
    except (OSError, ValueError):
        pass
    finally:
        os.close(state)


def _write_record(command: Command, state: int, state_path: str, fields: list[bytes]) -> None:
    """Replace the record of ``command`` in the state folder (open as ``state``) atomically,
    without syncing it to the disk (``_Fields.whole_text`` says why that is safe); quietly
    nothing when it cannot be written (a read-only folder still answers)."""
    import contextlib

    from .store.folder import Folders, write_file

    folders = Folders(state, state, state_path, state_path)
    with contextlib.suppress(OSError):
        write_file(folders, state, _name(command), _packed(fields), durable=False)


def _sealed_lock(command: Command, conditions: Conditions, known: bytes | None) -> bytes:
    """``=`` and the lock's bytes when they have the seal's sha256 (a young lock is then
    compared with them rather than hashed), else nothing.  Nothing too when the lock's
    metadata already proves its bytes: they would never be compared, only read with
    the record each time.  ``known`` bytes have that sha256 already: they are kept as
    they are, unread and unhashed (a lock another process rewrote since is told apart
    when they are compared with it)."""
    import hashlib

    if conditions.lock is None:
        return b""
    try:
        descriptor = os.open(command.lock_folder(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        info = os.stat(LOCK_NAME, dir_fd=descriptor, follow_symlinks=False)
        meta = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
        if lock_as_sealed(conditions.lock, meta, lambda: None):  # with no bytes: by its metadata alone
            return b""
        if known is not None:
            return b"=" + known
        data = _read(descriptor, LOCK_NAME)
    except OSError:
        return b""
    finally:
        os.close(descriptor)
    if data is None or hashlib.sha256(data).hexdigest() != conditions.lock.sha256:
        return b""
    return b"=" + data


def _parts(command: Command, text: str) -> list[bytes] | None:
    """The text as UTF-8, for ``status --json`` in two parts around its ``scanned_at``;
    None when it cannot be stored (a text that is not valid Unicode is not replayed, nor
    one holding a NUL byte, which ``_Fields.whole_text`` takes for a torn record)."""
    if "\0" in text:
        return None
    try:
        if command.name != "status --json":
            return [text.encode()]
        start = text.index(SCANNED_AT) + len(SCANNED_AT)
        return [text[:start].encode(), text[text.index('"', start) :].encode()]
    except ValueError:
        return None


def _name(command: Command) -> str:
    return RECORD_PREFIX + command.name.replace(" --", "-")


def _read(folder: int, name: str) -> bytes | None:
    """A file's bytes (never through a symlink); None when there is none.  (``statefolder``
    reads the same way, but importing it costs more than this whole read.)"""
    try:
        descriptor = os.open(name, _READ, dir_fd=folder)
    except FileNotFoundError:
        return None
    with open(descriptor, "rb") as file:
        return file.read()


def _packed(fields: Iterable[bytes]) -> Iterator[bytes]:
    """Each field as its length, a newline, its bytes (nothing in a field can end it), as
    the pieces to write one after the other, each field as it is: a large lock's bytes kept
    in the record are not copied again to be written."""
    for field in fields:
        yield b"%d\n" % len(field)
        yield field


class _Fields:
    """A record's fields (``_packed``), found where they lie in its bytes.  The stored text
    is printed from there rather than copied out: the answer about a large folder with
    many stale files is megabytes."""

    __slots__ = ("data", "spans")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.spans: list[tuple[int, int]] = []
        position = 0
        while position < len(data):
            newline = data.index(b"\n", position)
            end = newline + 1 + int(data[position:newline])
            if end > len(data):
                raise ValueError("a record cut short")
            self.spans.append((newline + 1, end))
            position = end

    def __len__(self) -> int:
        return len(self.spans)

    def __getitem__(self, index: int) -> bytes:
        start, end = self.spans[index]
        return self.data[start:end]

    def whole_text(self, index: int) -> bool:
        """Whether the field holds no NUL byte, as every text provgraph prints (a path holds
        none, and every other name is escaped).  The record is written without syncing it to
        the disk, since any full run writes it again: a crash of the machine may leave it
        torn, and the blocks never written then read as zeros.  Zeros in the conditions or
        the proof only fail to match (the full path answers), but zeros in the text would be
        printed: a text that holds one never is."""
        start, end = self.spans[index]
        return self.data.find(b"\0", start, end) < 0

    def view(self, index: int) -> memoryview:
        """The field in place, not copied."""
        start, end = self.spans[index]
        return memoryview(self.data)[start:end]

    def tail(self, first: int) -> list[bytes]:
        """The fields from ``first`` on, each copied out."""
        return [self.data[start:end] for start, end in self.spans[first:]]


def _encode_seal(seal: LockSeal | None) -> bytes:
    return b"" if seal is None else b"%d %d %d %d %s %d" % (*seal.meta, seal.sha256.encode(), seal.recorded_ns)


def _encode_conditions(conditions: Conditions) -> list[bytes]:
    fields = [_encode_seal(conditions.lock), b"%d" % conditions.scan_started_ns]
    fields += [_text(conditions.listing), _text(conditions.settings)]
    fields.append(b"%d" % len(conditions.walk_problems))
    fields += [_text(part) for row in conditions.walk_problems for part in row]
    for watched in conditions.watched:
        meta = b"" if watched.meta is None else b" ".join(b"%d" % number for number in watched.meta)
        fields += [_text(watched.path), watched.sight.value.encode(), meta]
    return fields


def _decode_conditions(fields: list[bytes]) -> Conditions:
    sealed, started, listing, settings, count = fields[:5]
    rows = [field.decode("utf-8", "surrogateescape") for field in fields[5 : 5 + 3 * int(count)]]
    problems = tuple((rows[index], rows[index + 1], rows[index + 2]) for index in range(0, len(rows), 3))
    rest = fields[5 + 3 * int(count) :]
    if len(rest) % 3:
        raise ValueError("a watched source cut short")
    watched = tuple(_decode_watched(rest[index : index + 3]) for index in range(0, len(rest), 3))
    return Conditions(_decode_seal(sealed), int(started), problems, listing.decode(), watched, settings.decode())


def _decode_seal(sealed: bytes) -> LockSeal | None:
    if not sealed:
        return None
    size, mtime, ctime, inode, sha256, recorded_ns = sealed.split()
    return LockSeal((int(size), int(mtime), int(ctime), int(inode)), sha256.decode(), int(recorded_ns))


def _decode_watched(fields: list[bytes]) -> Watched:
    path, kind, meta = fields
    numbers = tuple(int(number) for number in meta.split())
    if numbers and len(numbers) != 4:
        raise ValueError("a watched file's metadata holds four numbers")
    return Watched(path.decode("utf-8", "surrogateescape"), Sight(kind.decode()), numbers or None)  # type: ignore[arg-type]


def _text(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")
