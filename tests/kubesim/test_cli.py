"""``python -m kubesim`` (what ``raybus kubesim`` runs): serves, writes a kubeconfig, stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.helpers import REPO, eventually_sync
from tests.kubeobjects import name_of


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widgets.yaml").write_text(
        """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.cli.test}
spec:
  group: cli.test
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""
    )
    cmd = [sys.executable, "-m", "kubesim", "--port", "0", "--kubeconfig", str(kubeconfig), "--kubelet", "off"]
    proc = subprocess.Popen([*cmd, "--crds", str(crds)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        eventually_sync(kubeconfig.exists, timeout=30, message="kubeconfig never written")
        api = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        try:
            namespaces = {name_of(n) for n in client.CoreV1Api(api).list_namespace().items}
            widgets: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
                "cli.test", "v1", "default", "widgets"
            )
        finally:
            api.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert {"default", "kube-system"} <= namespaces
    assert widgets["items"] == []
    assert proc.returncode == 0, out.decode()
    assert b"kubesim stopped" in out
