"""The one reading of ``PROVGRAPH_NOW``, shared by the command line and the integrations.

Tests, replays and demos pin the clock with it; every entry point must read
it the same way, or two of them would date one change differently.
"""

from __future__ import annotations

import os
from datetime import datetime

from .errors import ProvgraphError

__all__ = ["BadClock", "pinned_now"]

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
