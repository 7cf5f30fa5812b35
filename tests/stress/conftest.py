"""Fixtures of the stress suite: an empty memory root beside a folder that is outside it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty memory root; ``tmp_path / "outside"`` is a sibling that is not under it."""
    (tmp_path / "outside").mkdir()
    folder = tmp_path / "memory"
    folder.mkdir()
    return folder
