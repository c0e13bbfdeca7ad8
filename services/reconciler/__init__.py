"""The reconciler: stateless workers (``worker/``) and one pure package per kind (``raycluster/``,
``rayjob/``, ``rayservice/``, ``raycronjob/``)."""
