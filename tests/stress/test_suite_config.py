"""The suite runs where users run it: AgentScope users usually have pytest-asyncio,
whose configuration warning the suite's ``filterwarnings = ["error"]`` once turned
into an internal error before any test ran."""

from __future__ import annotations

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
