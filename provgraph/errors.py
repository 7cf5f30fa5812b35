"""The errors provgraph raises for its user, and the logger its warnings go to.

A caller (the command line, an integration) catches ``ProvgraphError`` and
shows its message as one line; anything else that escapes is a bug and keeps
its traceback, instead of passing for a user error.

A library does not print: its warnings go to the ``provgraph`` logger, and the
program that uses it decides where they end up.  A program that configured
nothing hears nothing (a ``NullHandler``); the command line shows each warning
as one line on stderr (``listening``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["LOGGER", "PathRefused", "ProvgraphError", "listening", "log_warning"]


class ProvgraphError(Exception):
    """An error the user can act on; its message is one sentence that says what is wrong."""


class PathRefused(ProvgraphError):
    """A path provgraph will not read as a file (not regular, outside the root, its own state)."""


LOGGER = logging.getLogger("provgraph")
LOGGER.addHandler(logging.NullHandler())

_LISTENERS: list[Callable[[str], None]] = []
"""Who hears each warning as it is logged, besides the logger's handlers (see ``listening``)."""


def log_warning(message: str) -> None:
    """Something the user should know that did not stop the answer (a lock set aside, a busy lock)."""
    for listener in tuple(_LISTENERS):
        listener(message)
    LOGGER.warning("%s", message)


@contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """``listener`` hears every warning logged inside the block: how the command line shows them."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)
