"""One error family: a user error is one line and exit 2; a bug keeps its traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

import provgraph.api
from provgraph.api import NotDerived, RootError
from provgraph.cli import UsageError, cli
from provgraph.clock import BadClock
from provgraph.errors import PathRefused, ProvgraphError
from provgraph.files import NotRegular, OutsideRoot, ProvgraphOwn
from provgraph.integrations.claude_code import BadEvent
from provgraph.store.folder import LockBusy
from provgraph.store.state import StateError


def test_every_user_error_is_a_provgraph_error():
    for error in (RootError, NotDerived, StateError, BadClock, LockBusy, UsageError, BadEvent, PathRefused):
        assert issubclass(error, ProvgraphError), error


def test_path_refusals_share_a_base():
    for error in (NotRegular, OutsideRoot, ProvgraphOwn):
        assert issubclass(error, PathRefused), error


def test_errors_that_were_value_errors_still_are():
    assert issubclass(BadClock, ValueError)
    assert issubclass(BadEvent, ValueError)


def test_a_bug_is_not_reported_as_a_user_error(memory, monkeypatch, capsys):
    memory.write("MEMORY.md", "index\n")

    def broken(*args, **kwargs):
        raise ValueError("an internal mistake")

    monkeypatch.setattr(provgraph.api.Memory, "refresh", broken)
    with pytest.raises(ValueError, match="an internal mistake"):
        cli("status", str(memory.root))
    assert "an internal mistake" not in capsys.readouterr().err


def test_a_bug_exits_1_with_a_traceback(memory):
    memory.write("MEMORY.md", "index\n")
    script = (
        "import sys, provgraph.api\n"
        "def broken(*args, **kwargs):\n"
        "    raise ValueError('an internal mistake')\n"
        "provgraph.api.Memory.refresh = broken\n"
        "from provgraph.cli import cli\n"
        "sys.exit(cli('status', sys.argv[1]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(memory.root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" in done.stderr


@pytest.mark.parametrize(
    ("args", "now", "needle"),
    [
        (("status", "missing"), None, "missing"),
        (("status",), "not a date", "PROVGRAPH_NOW"),
        (("stamp", "plain.md"), None, "plain.md"),
    ],
    ids=["root-error", "bad-clock", "not-derived"],
)
def test_each_user_error_is_one_line_and_exit_2(memory, run, args, now, needle):
    memory.write("MEMORY.md", "index\n")
    memory.write("plain.md", "no sources\n")
    code, out, err = run(*args, cwd=memory.root, now=now)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("provgraph: ")
    assert needle in err
