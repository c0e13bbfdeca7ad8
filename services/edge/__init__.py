"""The edge: the processes that touch the Kubernetes API, each with its own ServiceAccount and rules.

Three roles, each its own Deployment (``deploy/base/{watch,applier,prober}.yaml``) and ``raybus`` command:

- :mod:`services.edge.watch` (``raybus watch``): lists and watches, projects into KV ``raybus-objects``
  and publishes WatchEvents; writes nothing on the API server but its Lease.
- :mod:`services.edge.apply` (``raybus applier``): carries out the command batches the reconcilers
  publish, after checking each against its key: the only role that writes objects.
- :mod:`services.edge.probe` (``raybus prober``): polls Ray dashboards (through the API server's service
  proxy when asked) and publishes Observations; reads no object but a dashboard's auth token.

The roles never import each other (an import-linter contract). What they share sits directly in this
package: the API adapter (``kubeapi``), the planned call and its error (``calls``), Events (``events``),
the table of resource types (``resources``), ownerReferences (``ownerrefs``), the dashboard client
(``dashboard``), the pipeline metrics (``pipeline_metrics``); and what spans them: the process wiring
(``service``: any set of roles in one process) and each role's RBAC, derived from the requests it makes
(``permissions``, ``rbac_manifests``).
"""
