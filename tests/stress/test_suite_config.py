"""The suite runs where users run it: AgentScope users usually have pytest-asyncio,
whose configuration warning the suite's ``filterwarnings = ["error"]`` once turned
into an internal error before any test ran.  And it starts quickly: every parallel
worker collects every test file, so collecting imports no library that only some tests use."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("plugin", [[], ["-p", "no:asyncio"]], ids=["with-pytest-asyncio", "without-it"])
def test_the_test_command_starts_with_and_without_pytest_asyncio(plugin: list[str]) -> None:
    pytest.importorskip("pytest_asyncio")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", *plugin, "tests/test_readme.py"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert "tests collected" in done.stdout


def test_every_process_the_tests_start_runs_the_code_under_test(tmp_path: Path) -> None:
    """Installed editable or as a copy: the ``provgraph`` command of the tests
    and any child interpreter import the package the tests import, from any folder."""
    from conftest import CODE_UNDER_TEST, PROVGRAPH

    import provgraph

    expected = Path(provgraph.__file__).resolve()
    assert expected.parent.parent == CODE_UNDER_TEST
    child = subprocess.run(
        [sys.executable, "-c", "import provgraph; print(provgraph.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()).resolve() == expected
    command = subprocess.run(
        [PROVGRAPH, "why", "nothing.md", "--root", tmp_path],
        cwd=tmp_path,
        env={**os.environ, "PYTHONVERBOSE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    loaded = set(
        re.findall(
            r"^# code object from '?(\S+?provgraph[/\\]cli\.py)'?$|matches (\S+provgraph[/\\]cli\.py)$",
            command.stderr,
            re.M,
        )
    )
    assert {Path(path or other).resolve() for path, other in loaded} == {expected.parent / "cli.py"}


OPTIONAL_LIBRARIES = {"agentscope", "matplotlib", "nbclient", "nbformat", "ipykernel"}
"""Seconds of imports, needed only by the AgentScope and notebook tests."""


def test_collecting_the_tests_imports_no_library_that_only_some_tests_use(request: pytest.FixtureRequest) -> None:
    """A test file of an optional extra imports it when its first test runs (``tests/extras.py``),
    so that a worker that runs none of its tests never pays for the import."""
    from conftest import IMPORTED_BY_COLLECTION

    imported = request.config.stash[IMPORTED_BY_COLLECTION]
    assert {name.partition(".")[0] for name in imported} & OPTIONAL_LIBRARIES == set()
    assert "provgraph.integrations.agentscope" not in imported
