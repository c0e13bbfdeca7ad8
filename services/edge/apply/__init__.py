"""The apply role (``raybus applier``): carry out the reconcilers' command batches on the API server.

Power: the only role that writes objects: ``create`` / ``patch`` / ``delete`` of exactly the (kind, verb)
pairs of the authorization table (``authorize.ALLOWED``), status patches and finalizer updates of the
ray.io custom resources, ``create`` of Events, and the Ray dashboard's job and Serve endpoints through
the ``services/proxy`` subresource. On NATS it consumes ``RAYBUS_COMMANDS`` through the applier
partitions' durable consumers and publishes the outcomes on ``raybus.results.<key>``.

Each command is checked before it runs: may this key do it (``authorize``), does its content follow
from the key's custom resource (``provenance``), each once per batch (``checks``), is the batch a
current decision (``freshness``, ``staleness``). It is planned as an API call (``plan``), paced
(``throttle``), run side by side where the order allows (``waves``), what fails shows on the custom
resource (``failures``), and the outcomes of a batch's run are published together (``reports``).
"""
