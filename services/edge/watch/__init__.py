"""The watch role (``raybus watch``): the API server's objects into KV ``raybus-objects`` and WatchEvents.

Power: Kubernetes ``list`` and ``watch`` on every resource type raybus reads, and ``create`` / ``get`` /
``update`` of its own Lease ``raybus-watcher`` (``election``); no other write. On NATS it writes KV
``raybus-objects`` (the projection) and ``raybus-watcher`` (resume points), publishes WatchEvents on
``raybus.events.<key>`` and an object's lifecycle transitions on ``raybus.results.<key>``.

One replica is active (elected by the Lease); the others stand by. Informers (``informer``) feed the
projection (``projection``), which maps each object to its reconcile keys (``keymap``, ``relations``),
holds what it placed (``packing``, ``podfacts``) and stores how far each informer got (``resume``).
``kvfacts`` is the read side of the projection: the applier's and the prober's facts when they run
without an informer of their own.
"""
