"""kubesim: an embedded Kubernetes API server emulator with kubelet and Ray dashboard simulators.

It is a simulator, clearly named as one: raybus talks to it exactly as to a real cluster, through the
official ``kubernetes`` client and a kubeconfig. See README.md ("kubesim") for what it does not emulate.
"""
