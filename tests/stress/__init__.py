"""Stress suite: hostile memory folders, faults, concurrency and fuzzing."""
