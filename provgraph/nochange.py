"""The no-change rule: when the last result is the answer a full scan would give, unread.

Whether a derived file is stale depends only on the content of the memory files
and of the sources they declare, and on the stamps in the lock.  The last full
scan recorded what it saw of each of them (``Conditions``); when all of it
looks the same now, no input of its result can have changed, and a scan would
compute that very result again:

1. the walk meets the same problems, with the same reading settings;
2. the lock is the one the result was computed with (``lock_as_sealed``): the
   same metadata, old enough that equal metadata proves equal bytes, or else
   the same sha256 (and no sync tool's conflict copy beside it, which the
   caller checks, since merging one changes the stamps);
3. every memory file listed now has exactly the size, mtime, ctime and inode
   recorded when it was last read (compared as one digest of the whole
   listing, ``listing_key``), so none was added, removed, renamed or written;
4. no memory file was modified within ``RACY_WINDOW_NS`` of that scan's start,
   where equal metadata proves nothing (the rule git applies to its index);
5. every declared source outside the listing (a file that is not ``*.md``, a
   missing file, a refused one) looks as it did (``Watched``): still missing,
   still refused for the same reason, or the same metadata, not racy.

The command line's quick answer (``replay``) applies rules 3 and 4 in full once
after each full run, then keeps the walk's bytes it proved them for; a later walk
with the very same bytes is the same listing, and only rules 1, 2 and 5 are
checked again (``holds_as_proven``).

Everything here is pure: how a source is looked at is passed in (``api`` asks its
``FileSource``, the command's quick answer ``walk.sight``).
The module imports nothing but ``marshal``, built into the interpreter: the
command line's quick answer (``replay``) applies the same rule
before anything else of provgraph is imported, and ``enum`` alone would cost it
more than walking a small folder.
"""

from __future__ import annotations

import marshal

from .store.lock import LOCK_NAME, is_sync_copy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from typing import ClassVar


__all__ = [
    "LOCK_NAME",
    "RACY_WINDOW_NS",
    "Conditions",
    "Glance",
    "InOrder",
    "LockSeal",
    "Look",
    "Sight",
    "Watched",
    "decode_watched",
    "encode_watched",
    "holds",
    "holds_as_proven",
    "holds_in_order",
    "is_sync_copy",
    "listing_bytes",
    "listing_key",
    "lock_as_sealed",
    "metas_of",
    "joined_paths",
    "listing_parts",
    "numbers_bytes",
    "renewed_seal",
    "watched_sources",
]

RACY_WINDOW_NS = 2_000_000_000
"""A file whose mtime is this close to (or after) the previous scan's start may
have been written again within the file system's timestamp granularity after
it was read, with identical metadata; such a file is read again rather than
trusted (the same rule git applies to its index)."""

Meta = tuple[int, int, int, int]
"""What stat says of a file: size, mtime_ns, ctime_ns, inode (``model.FileMeta`` is one)."""

ProblemRow = tuple[str, str, str]
"""A problem the walk met: path, kind (``ProblemKind`` value), detail."""


class Sight:
    """What looking at a watched source found.  The values of the refusals are the
    problem kinds a scan reports for them, as the cache writes them.

    An enumeration written out rather than an ``enum.Enum``: importing ``enum`` (with the
    ``functools`` and ``collections`` it pulls in) cost 4 to 7 ms, a quarter of the
    command's quick answer on a folder of a thousand files.  It behaves as the enum did
    where provgraph uses it: one object per member, compared by identity, its ``name``
    and ``value``, ``Sight(value)`` for the member of a value (``ValueError`` for
    another), and a ``repr`` such as ``Sight.FILE``."""

    __slots__ = ("name", "value")
    name: str
    value: str

    FILE: ClassVar[Sight]
    """A regular file under the root, with its metadata."""
    MISSING: ClassVar[Sight]
    """No file of that name."""
    OUTSIDE_ROOT: ClassVar[Sight]
    """A path that leads out of the root: refused, never opened."""
    NOT_REGULAR: ClassVar[Sight]
    """A folder, a FIFO, provgraph's own files: refused, never opened."""
    _BY_VALUE: ClassVar[dict[str, Sight]] = {}

    def __new__(cls, value: str) -> Sight:
        member = cls._BY_VALUE.get(value)
        if member is None:
            raise ValueError(f"{value!r} is not a valid Sight")
        return member

    @classmethod
    def _member(cls, name: str, value: str) -> Sight:
        member = object.__new__(cls)
        object.__setattr__(member, "name", name)
        object.__setattr__(member, "value", value)
        cls._BY_VALUE[value] = member
        return member

    def __repr__(self) -> str:
        return f"Sight.{self.name}"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Sight is frozen")

    def __reduce__(self) -> tuple[type[Sight], tuple[str]]:
        return Sight, (self.value,)


Sight.FILE = Sight._member("FILE", "file")
Sight.MISSING = Sight._member("MISSING", "missing")
Sight.OUTSIDE_ROOT = Sight._member("OUTSIDE_ROOT", "outside-root")
Sight.NOT_REGULAR = Sight._member("NOT_REGULAR", "bad-entry")


class _Record:
    """A small frozen value compared by its fields (its ``__slots__``), as a ``NamedTuple``
    would be; written out because importing ``typing`` would cost the command's quick
    answer more than walking a small folder."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, *values: object) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._fields()!r}"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")


class Watched(_Record):
    """One declared source outside the listing, as it looked."""

    __slots__ = ("path", "sight", "meta")
    path: str
    sight: Sight
    meta: Meta | None
    """Only for ``Sight.FILE``."""

    def __init__(self, path: str, sight: Sight, meta: Meta | None = None) -> None:
        super().__init__(path, sight, meta)


class LockSeal(_Record):
    """What the lock was when the result was saved: its metadata, the sha256 of its bytes,
    and when this was recorded.  The result holds only for that very lock."""

    __slots__ = ("meta", "sha256", "recorded_ns")
    meta: Meta
    sha256: str
    recorded_ns: int

    def __init__(self, meta: Meta, sha256: str, recorded_ns: int) -> None:
        super().__init__(meta, sha256, recorded_ns)


class Conditions(_Record):
    """What the last full scan saw of every input of its result (see the module's rule)."""

    __slots__ = ("lock", "scan_started_ns", "walk_problems", "listing", "watched", "settings")
    lock: LockSeal | None
    scan_started_ns: int
    """Real clock at the start of that scan (for the racy window)."""
    walk_problems: tuple[ProblemRow, ...]
    listing: str
    """``listing_key`` of the memory files read, with their metadata when read."""
    watched: tuple[Watched, ...]
    settings: str
    """The reading settings (the sources heading, the root's names) the result was made with."""

    def __init__(
        self,
        lock: LockSeal | None,
        scan_started_ns: int,
        walk_problems: tuple[ProblemRow, ...],
        listing: str,
        watched: tuple[Watched, ...],
        settings: str,
    ) -> None:
        super().__init__(lock, scan_started_ns, walk_problems, listing, watched, settings)


class Look(_Record):
    """What a refresh sees now: the walk's listing and problems, and its settings."""

    __slots__ = ("listing", "walk_problems", "settings")
    listing: Mapping[str, Meta]
    walk_problems: tuple[ProblemRow, ...]
    settings: str

    def __init__(self, listing: Mapping[str, Meta], walk_problems: tuple[ProblemRow, ...], settings: str) -> None:
        super().__init__(listing, walk_problems, settings)


class Glance(_Record):
    """What the command's quick answer sees now: the walk's listing as ``listing_bytes``
    in the order the folders listed it, the walk's problems, and the settings."""

    __slots__ = ("listing", "walk_problems", "settings")
    listing: bytes
    walk_problems: tuple[ProblemRow, ...]
    settings: str

    def __init__(self, listing: bytes, walk_problems: tuple[ProblemRow, ...], settings: str) -> None:
        super().__init__(listing, walk_problems, settings)


class InOrder(_Record):
    """What the command's quick answer sees when its record holds no proof yet (the first
    look after a full run): the walk's paths and their numbers (four a file, ``Meta``'s
    order) as the folders listed them, the walk's problems, and the settings."""

    __slots__ = ("paths", "numbers", "walk_problems", "settings")
    paths: Sequence[str]
    numbers: list[int]
    walk_problems: tuple[ProblemRow, ...]
    settings: str

    def __init__(
        self, paths: Sequence[str], numbers: list[int], walk_problems: tuple[ProblemRow, ...], settings: str
    ) -> None:
        super().__init__(paths, numbers, walk_problems, settings)


def holds(
    conditions: Conditions,
    look: Look,
    lock_holds: Callable[[LockSeal | None], bool],
    sight: Callable[[str], Watched | None],
) -> bool:
    """True when nothing the last result depends on can have changed (rules 1 to 5).

    ``lock_holds`` applies ``lock_as_sealed`` to the lock on disk; ``sight`` looks at
    one source (None when it cannot be looked at, which is never as before).  The
    cheap comparisons come first (a file just written, what a change run meets, is
    seen before a young lock is read); the lock, the digest and the watched sources after."""
    if _newest(look.listing.values()) >= conditions.scan_started_ns - RACY_WINDOW_NS:
        return False
    return _all_hold(
        conditions,
        look.walk_problems,
        look.settings,
        lock_holds,
        lambda: listing_key(look.listing) == conditions.listing,
        sight,
    )


def holds_as_proven(
    conditions: Conditions,
    glance: Glance,
    proof: bytes,
    lock_holds: Callable[[LockSeal | None], bool],
    sight: Callable[[str], Watched | None],
) -> bool:
    """``holds``, for a walk seen only as bytes, given ``proof``: the bytes of a walk for
    which ``holds`` was true under these very ``conditions``.  Equal bytes are the same
    paths with the same metadata, so rules 3 and 4 hold as they held for the proof (the
    racy window is measured from these conditions' scan); rules 1, 2 and 5 are checked
    again.  Other bytes prove nothing: a folder listed in another order, as much as a
    changed one, gets False."""
    return _all_hold(
        conditions, glance.walk_problems, glance.settings, lock_holds, lambda: glance.listing == proof, sight
    )


def holds_in_order(
    conditions: Conditions,
    seen: InOrder,
    lock_holds: Callable[[LockSeal | None], bool],
    sight: Callable[[str], Watched | None],
) -> bool:
    """``holds``, for a walk seen as its paths and numbers in the walk's order.  Rule 4 is
    looked at first, on the numbers themselves: a file just written (what a change run
    meets) is found before the listing is mapped and digested and before the lock is read,
    a large one while it is young.  The rules are the same conjunction, in another order."""
    if _newest_number(seen.numbers) >= conditions.scan_started_ns - RACY_WINDOW_NS:
        return False

    def listing_holds() -> bool:
        return listing_key(dict(zip(seen.paths, metas_of(seen.numbers), strict=True))) == conditions.listing

    return _all_hold(conditions, seen.walk_problems, seen.settings, lock_holds, listing_holds, sight)


def _all_hold(
    conditions: Conditions,
    walk_problems: tuple[ProblemRow, ...],
    settings: str,
    lock_holds: Callable[[LockSeal | None], bool],
    listing_holds: Callable[[], bool],
    sight: Callable[[str], Watched | None],
) -> bool:
    if walk_problems != conditions.walk_problems or settings != conditions.settings:
        return False
    if not lock_holds(conditions.lock) or not listing_holds():
        return False
    limit = conditions.scan_started_ns - RACY_WINDOW_NS
    return all(_as_before(sight(before.path), before, limit) for before in conditions.watched)


def _as_before(now: Watched | None, before: Watched, limit: int) -> bool:
    return now == before and (now.meta is None or max(now.meta[1], now.meta[2]) < limit)


def _newest(metas: Iterable[Meta]) -> int:
    """The latest mtime or ctime, in nanoseconds (0 for no file).  The metadata is turned
    into its columns (``zip``) and each column's maximum taken, loops that run in C: a
    loop in Python over a large folder's files cost more than the rest of the rule."""
    columns = tuple(zip(*metas, strict=True))
    return max(max(columns[1]), max(columns[2])) if columns else 0


def _newest_number(numbers: list[int]) -> int:
    """``_newest`` of a walk's numbers, four a file: the latest of every second and third
    (mtime and ctime), taken by slices and ``max``, loops that run in C."""
    return max(max(numbers[1::4], default=0), max(numbers[2::4], default=0))


def lock_as_sealed(
    seal: LockSeal | None, meta: Meta | None, read: Callable[[], bytes | None], known: bytes | None = None
) -> bool:
    """Rule 2, for a lock file with ``meta`` (None: there is none) and bytes ``read()``
    gives when the metadata cannot prove them.  ``known``, bytes already checked to have
    the seal's sha256, are compared instead of hashing what is read again."""
    if meta is None or seal is None:
        return meta is None and seal is None
    if _proven_by_metadata(seal, meta):
        return True
    data = read()
    if data is None:
        return False
    return data == known if known is not None else _sha256(data) == seal.sha256


def _proven_by_metadata(seal: LockSeal, meta: Meta) -> bool:
    return meta == seal.meta and max(meta[1], meta[2]) < seal.recorded_ns - RACY_WINDOW_NS


def renewed_seal(seal: LockSeal | None, meta: Meta | None, looked_ns: int) -> LockSeal | None:
    """For a lock whose bytes were just found to be the sealed ones because its metadata
    could not prove them (it was written within the racy window of the seal): a seal of
    the same bytes for ``meta``, recorded at ``looked_ns`` (the real clock before the lock
    was looked at), when ``meta`` is by then older than the racy window, so that from
    then on the metadata proves the bytes (rule 2).  None when there is nothing to renew."""
    if seal is None or meta is None or _proven_by_metadata(seal, meta):
        return None
    if max(meta[1], meta[2]) >= looked_ns - RACY_WINDOW_NS:
        return None
    return LockSeal(meta, seal.sha256, looked_ns)


def listing_key(listing: Mapping[str, Meta]) -> str:
    """A digest of every path with its metadata, independent of listing order: the
    sha256 of ``listing_bytes`` of the sorted paths."""
    paths = sorted(listing)
    return _sha256(listing_bytes(paths, list(map(listing.__getitem__, paths))))


def listing_bytes(paths: Sequence[str], metas: Iterable[Meta]) -> bytes:
    """Every path with its metadata (``metas[i]`` is that of ``paths[i]``), in this order:
    ``numbers_bytes`` of the metadata's numbers.  (``itertools`` is imported here: the
    quick answer, which never calls this once its record holds a proof, does without.)"""
    from itertools import chain

    return numbers_bytes(paths, list(chain.from_iterable(metas)))


def numbers_bytes(paths: Sequence[str], numbers: list[int]) -> bytes:
    """Every path with its metadata, four numbers a path in ``Meta``'s order (as
    ``walk.walk_in_order`` gives them), in this order.

    The count, the paths joined by NUL (a path holds none), then the numbers as
    ``marshal`` writes a list in its version 2 (no references between objects, so equal
    numbers give equal bytes whatever objects hold them; any integer, a huge inode too):
    two listings in the same order have the same bytes only if they are equal.  Built by
    C loops, without ``struct`` or a formatted number: the walk of a large folder would
    cost less than formatting its numbers as text."""
    return b"".join(listing_parts(len(paths), joined_paths(paths), numbers))


def joined_paths(paths: Sequence[str]) -> bytes:
    """The paths joined by NUL (a path holds none), encoded: any code point, one way."""
    return "\0".join(paths).encode("utf-8", "surrogatepass")


def listing_parts(count: int, names: bytes, numbers: list[int]) -> tuple[bytes, bytes, bytes, bytes]:
    """``numbers_bytes`` in its parts (``names`` from ``joined_paths``), for a caller that
    hashes a large listing without copying it into one buffer."""
    return b"%d\0" % count, names, b"\0", marshal.dumps(numbers, 2)


def metas_of(numbers: list[int]) -> Iterator[Meta]:
    """The numbers of a walk (``walk.walk_in_order``), four at a time: each file's ``Meta``."""
    quads = iter(numbers)
    return zip(quads, quads, quads, quads, strict=True)


def _sha256(data: bytes) -> str:
    """``hashlib.sha256``; for a small input, from CPython's own module where there is one:
    ``hashlib`` loads OpenSSL first, which costs more than hashing a small folder's listing
    (OpenSSL's is faster, which pays for a large one)."""
    try:
        module = __import__("_sha256" if len(data) < _SMALL else "hashlib")
    except ImportError:
        module = __import__("hashlib")
    return str(module.sha256(data).hexdigest())


_SMALL = 1 << 18


# -- what the last scan watched, as the full path records it --------------------


def watched_sources(
    sources: Iterable[str],
    read: Mapping[str, Meta],
    refused: Mapping[str, str],
    stats: Mapping[str, Meta],
) -> tuple[Watched, ...]:
    """The sources to watch outside the listing: every declared source (``sources``)
    and every refused one (``refused``: path to problem kind value) not among the
    memory files ``read``; ``stats`` holds the metadata of those that were files."""
    watched = []
    for path in sorted((set(sources) | refused.keys()) - read.keys()):
        kind = refused.get(path)
        meta = stats.get(path)
        if kind is not None:
            watched.append(Watched(path, Sight(kind)))
        elif meta is None:
            watched.append(Watched(path, Sight.MISSING))
        else:
            watched.append(Watched(path, Sight.FILE, tuple(meta)))  # type: ignore[arg-type]
    return tuple(watched)


def encode_watched(watched: Iterable[Watched]) -> list[list[object]]:
    """As the cache writes them: ``[path, [size, mtime, ctime, inode]]`` for a file,
    ``[path, null]`` for a missing one, ``[path, kind]`` for a refused one."""
    return [[item.path, _encode_sight(item)] for item in watched]


def _encode_sight(item: Watched) -> list[int] | str | None:
    if item.sight is Sight.FILE:
        return list(item.meta or ())
    return None if item.sight is Sight.MISSING else item.sight.value


def decode_watched(rows: object) -> tuple[Watched, ...]:
    """``encode_watched`` read back; ``ValueError`` for anything else."""
    if not isinstance(rows, list):
        raise ValueError("the watched sources must be a list")
    return tuple(_decode_one(row) for row in rows)


def _decode_one(row: object) -> Watched:
    if not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], str):
        raise ValueError("a watched source must hold its path and what stat said")
    path, seen = row
    if seen is None:
        return Watched(path, Sight.MISSING)
    if isinstance(seen, str):
        return Watched(path, Sight(seen))
    if isinstance(seen, list) and len(seen) == 4 and all(type(number) is int for number in seen):
        return Watched(path, Sight.FILE, (seen[0], seen[1], seen[2], seen[3]))
    raise ValueError("a watched source must hold a stat result, null or a problem kind")
