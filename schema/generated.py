"""Files generated from code (CRDs, RBAC manifests): which are stale, and the ``--check`` report.

A generator is a mapping of file name to content; this module compares it with a directory, so every
generator's ``--check`` and drift test mean the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def stale_files(generated: Mapping[str, str], directory: Path) -> list[str]:
    """Names of ``generated`` files that are missing from ``directory`` or differ from their content."""
    return [
        name
        for name, text in generated.items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]


def report_stale(generated: Mapping[str, str], directory: Path) -> int:
    """Print each stale file of ``directory``; the exit code of a ``--check``: 1 if any, else 0."""
    stale = stale_files(generated, directory)
    for name in stale:
        print(f"stale: {directory / name}")
    return 1 if stale else 0
