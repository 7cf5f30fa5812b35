"""The lineage notebook runs top to bottom on a fresh kernel and draws its pictures.

Executed in a temporary folder, so that the README picture it saves lands
there and not in the repository.  Needs the ``notebook`` extra.
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest
from extras import needs

pytestmark = needs("nbformat", "nbclient", "matplotlib", "ipykernel")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOK = NOTEBOOKS / "memory_lineage.ipynb"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header; fails on anything that is not a PNG."""
    assert data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def outputs(notebook, kind: str) -> list:
    """Every output of code cells holding ``kind`` (``image/png``, ``text/html``...)."""
    return [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if kind in output.get("data", {})
    ]


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
    """The notebook as a fresh kernel leaves it, and the folder it ran in."""
    import nbclient
    import nbformat

    folder = tmp_path_factory.mktemp("notebook")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    return notebook, folder


def test_runs_every_cell_in_order_without_an_error(executed):
    notebook, _ = executed
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]

    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    errors = [output for cell in code for output in cell.outputs if output.output_type == "error"]
    assert errors == []
    stderr = [output.text for cell in code for output in cell.outputs if output.get("name") == "stderr"]
    assert stderr == [], "a warning was printed"


def test_draws_the_two_lineages_and_the_timeline(executed):
    notebook, _ = executed
    pictures = [png_size(base64.b64decode(output.data["image/png"])) for output in outputs(notebook, "image/png")]

    assert len(pictures) == 3
    assert all(width >= 600 and height >= 300 for width, height in pictures)


def test_saves_the_demo_picture_beside_the_notebook(executed):
    _, folder = executed

    width, height = png_size((folder / "demo_lineage.png").read_bytes())
    assert width >= 800 and height >= 400


def test_tables_every_stale_file_with_its_chain(executed):
    notebook, _ = executed
    tables = [output.data["text/html"] for output in outputs(notebook, "text/html")]

    demo = next(table for table in tables if "The demo memory" in table)
    assert demo.count("<tr>") == 3  # the header, profile.md and digest.md
    chain = " → ".join(f"<code>{name}</code>" for name in ("user-facts.md", "profile.md", "digest.md"))
    assert chain in demo


def test_committed_notebook_carries_its_outputs():
    """What readers see on the repository page without running anything: pictures, no errors."""
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)

    assert len(outputs(notebook, "image/png")) == 3
    assert not [
        output for cell in notebook.cells for output in cell.get("outputs", ()) if output.output_type == "error"
    ]
    png_size((NOTEBOOKS / "demo_lineage.png").read_bytes())
