"""Skip the tests of an optional extra that is not installed, without importing it.

``pytest.importorskip`` at the top of a test file imports the module as the file is
collected, and every parallel worker of the run collects every file: AgentScope alone
takes seconds to import, paid again by each worker.  ``needs`` only asks whether the
module can be found.  A test file of the extra then binds its global names to what it
uses of AgentScope (and of ``scripted_agent.py``, built on it) in an autouse fixture of
module scope, ``agentscope_loaded``: the import is paid once by each worker that runs one
of the file's tests, and by no other.
"""

from __future__ import annotations

import importlib.util

import pytest


def needs(*modules: str) -> pytest.MarkDecorator:
    """A mark that skips its tests unless every one of ``modules`` is installed."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}, not installed")
