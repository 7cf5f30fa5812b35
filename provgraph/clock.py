"""The clock, read in one place: the ``now`` that dates changes, and the wall clock for the racy window.

Two clocks, on purpose.  ``now`` dates what a scan sees (a stamp, the day a
change was first seen); tests and demos pin it with ``PROVGRAPH_NOW`` or
``now=``, and every entry point must read it the same way, or two of them
would date one change differently.  ``wall_ns`` is the machine's real clock,
compared with the times the file system writes: it is never pinned.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from .errors import ProvgraphError

__all__ = ["BadClock", "current", "pinned_now", "wall_ns"]

CLOCK_VARIABLE = "PROVGRAPH_NOW"


class BadClock(ProvgraphError, ValueError):
    """``PROVGRAPH_NOW`` holds something that is not an ISO 8601 date or timestamp."""

    def __init__(self, value: str) -> None:
        super().__init__(f"{CLOCK_VARIABLE}={value!r} is not an ISO 8601 date or timestamp")
        self.value = value


def pinned_now() -> datetime | None:
    """``PROVGRAPH_NOW`` (ISO 8601) when set, else None (the real clock).

    A value without a time zone is local time, as a person typing it means.
    """
    value = os.environ.get(CLOCK_VARIABLE)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BadClock(value) from None
    return parsed if parsed.tzinfo is not None else parsed.astimezone()


def current(now: datetime | None = None) -> datetime:
    """``now`` when a caller gives one (it must be aware), else the real time in the local zone.

    Aware, because a stamp is an instant: a naive time would mean another
    instant on every machine that reads the lock.
    """
    if now is None:
        return datetime.now().astimezone()
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime (with a time zone)")
    return now


def wall_ns() -> int:
    """The machine's real clock, in nanoseconds, for the racy window; never ``now``.

    It is compared with the mtimes and ctimes the file system writes, to tell
    whether equal metadata proves an unchanged file (a file written within
    ``RACY_WINDOW_NS`` of a scan may have changed again without moving them).
    A pinned ``now`` (a demo a week ahead) would make that comparison trust a
    file written a moment ago, so this clock is never pinned.
    """
    return time.time_ns()
