"""``python -m kubesim``: same as ``raybus kubesim``."""

from __future__ import annotations

import sys

from kubesim.cli import main

sys.exit(main(sys.argv[1:]))
