"""Access to a Kubernetes API server: the URL, credentials and TLS settings of a kubeconfig or of the Pod's
ServiceAccount, read without the official client (which no long-running raybus process loads).

Shared by the edge's adapter (:mod:`services.edge.kubeapi`) and kubesim's client for attached simulators
(:mod:`kubesim.apiclient`); it imports neither.
"""
