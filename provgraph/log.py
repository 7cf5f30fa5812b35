"""Where the library's warnings go: the ``provgraph`` logger, never a stream of its own.

A library does not print; the program that uses it decides where its warnings
end up.  The command line shows them as one line on stderr (``cli.main`` listens
while it runs); a program that configured nothing hears nothing, thanks to the
``NullHandler``.

``logging`` (with ``traceback``, ``threading``, ``string`` and ``weakref``) costs a
command more to import than a small folder costs to scan, and a run that warns of
nothing never needs it: it is imported at the first warning, or when ``LOGGER`` is
first asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging

__all__ = ["listening", "log_warning"]

_LISTENERS: list[Callable[[str], None]] = []
"""Who hears each warning as it is logged, besides the logger's handlers (see ``listening``)."""


def log_warning(message: str) -> None:
    """Something the user should know that did not stop the answer (a lock set aside, a busy lock)."""
    for listener in tuple(_LISTENERS):
        listener(message)
    _logger().warning("%s", message)


@contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """``listener`` hears every warning logged inside the block, without ``logging`` being
    imported for a run that logs none: how the command line shows them."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def _logger() -> logging.Logger:
    import logging

    logger = logging.getLogger("provgraph")
    if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(logging.NullHandler())
    return logger


def __getattr__(name: str) -> logging.Logger:
    """``LOGGER``, the ``provgraph`` logger, made (and ``logging`` imported) when first asked for."""
    if name == "LOGGER":
        return _logger()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
