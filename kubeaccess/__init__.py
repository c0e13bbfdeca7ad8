"""Access to a Kubernetes API server: the URL, credentials and TLS settings of a kubeconfig or of the Pod's
ServiceAccount, read without the official client (which no long-running raybus process loads), and the
HTTP/1.1 client the services send their requests with (:mod:`kubeaccess.asynchttp`).

Shared by the edge's adapter (:mod:`services.edge.kubeapi`) and kubesim's client for attached simulators
(:mod:`kubesim.apiclient`); the HTTP client also by the dashboard client and the status service's access
reviews. It imports neither the services nor kubesim.
"""
