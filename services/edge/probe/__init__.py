"""The probe role (``raybus prober``): poll the Ray dashboards of live RayJobs and RayServices.

Power: Kubernetes ``get`` of ``services/proxy`` and ``pods/proxy`` (a dashboard reached through the API
server) and of Secrets (a dashboard's auth token); no write. On NATS it reads KV ``raybus-objects`` and
publishes Observations on ``raybus.events.<key>``, only when what a dashboard says changed.

``probekinds`` is the table of what is polled per kind; ``prober`` the loop, sharing the partitions with
the other prober replicas.
"""
