"""Where the library's warnings go: the ``provgraph`` logger, never a stream of its own.

A library does not print; the program that uses it decides where its warnings
end up.  The command line shows them as one line on stderr (``cli.main``); a
program that configured nothing hears nothing, thanks to the ``NullHandler``.
"""

from __future__ import annotations

import logging

__all__ = ["LOGGER", "log_warning"]

LOGGER = logging.getLogger("provgraph")
LOGGER.addHandler(logging.NullHandler())


def log_warning(message: str) -> None:
    """Something the user should know that did not stop the answer (a lock set aside, a busy lock)."""
    LOGGER.warning("%s", message)
