# Everyday recipes. `pip install -e '.[dev]'` provides `just` (rust-just).

default:
    @just --list

# Run the whole test suite, in parallel on every core
test *ARGS:
    python -m pytest -q -n auto --dist worksteal {{ARGS}}

# The same, every property test at its full depth (as the second run of .ci/run)
test-thorough *ARGS:
    PROVGRAPH_TESTS_THOROUGH=1 python -m pytest -q -n auto --dist worksteal {{ARGS}}

# The built-in example
demo:
    provgraph demo

# Benchmark against the floors (e.g. `just bench --files 1000 10000 --markdown`; see tests/bench)
bench *ARGS:
    python -m tests.bench {{ARGS}}

# Lint, format check and types (mypy, strict: see pyproject.toml)
lint:
    ruff check provgraph tests
    ruff format --check provgraph tests
    mypy provgraph

# Execute the lineage notebook in place, keeping its outputs; redraws notebooks/demo_lineage.png
notebook:
    #!/usr/bin/env python
    import nbclient, nbformat
    path = "notebooks/memory_lineage.ipynb"
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, record_timing=False, resources={"metadata": {"path": "notebooks"}}).execute()
    nbformat.write(notebook, path)
