"""The ``raybus`` command: services, the embedded stack (``up``), kubesim, CRDs, history and replay."""
