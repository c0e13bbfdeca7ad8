"""Access to a Kubernetes API server through the official client's configuration.

Shared by the edge's adapter (:mod:`services.edge.kubeapi`) and kubesim's client for attached simulators
(:mod:`kubesim.apiclient`); it imports neither.
"""
