"""The benchmark is a program, not a test module: pytest never collects it."""

collect_ignore_glob = ["*.py"]
