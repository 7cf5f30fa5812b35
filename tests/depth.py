"""How many examples a property test tries: ``@settings(max_examples=examples(N))``.

``N`` is the search the property was written for.  The README's test command, run at
every change, tries a quarter of it, so that the whole suite stays quick on
two cores; with ``PROVGRAPH_TESTS_THOROUGH=1`` every property tries all ``N`` (the
second run of ``.ci/run`` does).  A property that names no count gets hypothesis's
default, 100, when thorough and a quarter of it otherwise (``conftest.py`` loads
the profile).  Every property runs either way; only the depth of its search differs.
"""

from __future__ import annotations

import os

THOROUGH = os.environ.get("PROVGRAPH_TESTS_THOROUGH", "") not in ("", "0")
QUICK_SHARE = 4
"""The README's command tries one example in this many."""
LEAST = 10
"""No property tries fewer examples than this."""


def examples(written_for: int) -> int:
    """The examples to try of a property written for ``written_for``."""
    return written_for if THOROUGH else max(LEAST, written_for // QUICK_SHARE)


def default_examples() -> int:
    """The examples of a property that names no count (hypothesis's default is 100)."""
    return examples(100)
