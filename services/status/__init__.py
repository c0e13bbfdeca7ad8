"""The status service: the system of record for history (docs/architecture.md#status).

It consumes ``RAYBUS_RESULTS`` (command outcomes and confirmed transitions), persists them idempotently
to SQL (SQLite by default, PostgreSQL in production) and serves them read-only over HTTP for
``raybus history``. Kubernetes stays the source of truth for current state; this package keeps the
past, including the whole life of custom resources that no longer exist.

Modules: ``kinds`` (names and status fields per kind), ``transition_folds`` (pure rules deriving resource rows
and kind views from transitions), ``models`` (tables), ``store`` (the only module issuing SQL),
``migrate`` (Alembic), ``consumer`` (bus → store), ``responses`` / ``openapi`` / ``api`` (HTTP),
``service`` (the process: ``run_status``, which ``raybus status`` runs), ``history_cli``
(``raybus history``).
"""
