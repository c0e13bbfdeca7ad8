"""raybus contracts: everything that crosses the bus, the ray.io/v1 types, and the names of subjects.

Pure data only: no I/O, no clock, no randomness (import-linter enforces it).
"""
