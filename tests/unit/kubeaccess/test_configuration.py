"""Loading a connection from kubeconfig files and from a Pod's ServiceAccount, as kubectl and client-go do."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeaccess import configuration as access
from kubeaccess.credentials import BasicAuth, BearerToken, ExecPlugin, NoCredentials, TokenFile

CA = "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _kubeconfig(path: Path, *, current: str = "", clusters: Any = (), users: Any = (), contexts: Any = ()) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": name, "cluster": body} for name, body in clusters],
        "users": [{"name": name, "user": body} for name, body in users],
        "contexts": [{"name": name, "context": body} for name, body in contexts],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_current_context_gives_server_ca_client_certificate_and_token(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "config",
        current="prod",
        clusters=[("c", {"server": "https://10.0.0.1:6443/", "certificate-authority-data": _b64(CA)})],
        users=[("u", {"token": "t0k", "client-certificate-data": _b64("CERT"), "client-key-data": _b64("KEY")})],
        contexts=[("prod", {"cluster": "c", "user": "u"})],
    )
    loaded = access.load(str(path))
    assert loaded.host == "https://10.0.0.1:6443" and loaded.ca_pem == CA and loaded.verify
    assert loaded.client_pem == ("CERT", "KEY") and loaded.credentials == BearerToken("t0k")
    assert access.auth_headers(loaded) == {"Authorization": "Bearer t0k"}


def test_paths_are_relative_to_the_file_that_names_them(tmp_path: Path) -> None:
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "ca.crt").write_text(CA)
    (tmp_path / "creds" / "token").write_text("from-file")
    path = _kubeconfig(
        tmp_path / "creds" / "config",
        current="x",
        clusters=[("c", {"server": "https://h", "certificate-authority": "ca.crt", "tls-server-name": "kube.local"})],
        users=[("u", {"tokenFile": "token"})],
        contexts=[("x", {"cluster": "c", "user": "u"})],
    )
    loaded = access.load(str(path))
    assert loaded.ca_pem == CA and loaded.tls_server_name == "kube.local"
    assert isinstance(loaded.credentials, TokenFile) and loaded.credentials.path == tmp_path / "creds" / "token"
    assert access.auth_headers(loaded) == {"Authorization": "Bearer from-file"}


def test_kubeconfig_files_merge_with_the_first_file_winning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _kubeconfig(
        tmp_path / "a",
        current="",
        clusters=[("c", {"server": "https://first"})],
        users=[("u", {"username": "admin", "password": "pw"})],
    )
    second = _kubeconfig(
        tmp_path / "b",
        current="ctx",
        clusters=[("c", {"server": "https://second", "insecure-skip-tls-verify": True})],
        contexts=[("ctx", {"cluster": "c", "user": "u"})],
    )
    monkeypatch.setenv(access.KUBECONFIG_ENV, f"{first}:{second}")
    monkeypatch.delenv(access.SERVICE_HOST_ENV, raising=False)
    loaded = access.load(None)
    assert loaded.host == "https://first" and loaded.verify and loaded.credentials == BasicAuth("admin", "pw")
    assert access.load(f"{first}:{second}") == loaded  # a list named outright merges the same way


def test_an_incomplete_kubeconfig_says_what_is_missing(tmp_path: Path) -> None:
    none = _kubeconfig(tmp_path / "none", clusters=[("c", {"server": "https://h"})])
    with pytest.raises(access.ConfigError, match="no current-context in .*none"):
        access.load(str(none))
    dangling = _kubeconfig(tmp_path / "dangling", current="gone")
    with pytest.raises(access.ConfigError, match="context 'gone' is not in"):
        access.load(str(dangling))
    serverless = _kubeconfig(
        tmp_path / "serverless", current="x", clusters=[("c", {})], contexts=[("x", {"cluster": "c"})]
    )
    with pytest.raises(access.ConfigError, match="names no cluster with a server"):
        access.load(str(serverless))
    (tmp_path / "garbage").write_text("{: not yaml")
    with pytest.raises(access.ConfigError, match="is not YAML"):
        access.load(str(tmp_path / "garbage"))
    with pytest.raises(OSError):
        access.load(str(tmp_path / "missing"))


def test_an_auth_provider_is_refused_by_name_and_a_bare_user_sends_nothing(tmp_path: Path) -> None:
    legacy = _kubeconfig(
        tmp_path / "legacy",
        current="x",
        clusters=[("c", {"server": "https://h"})],
        users=[("u", {"auth-provider": {"name": "gcp", "config": {"access-token": "secret-token"}}})],
        contexts=[("x", {"cluster": "c", "user": "u"})],
    )
    with pytest.raises(access.ConfigError) as refused:
        access.load(str(legacy))
    assert "'gcp'" in str(refused.value) and "exec" in str(refused.value) and "secret-token" not in str(refused.value)
    bare = _kubeconfig(
        tmp_path / "bare",
        current="x",
        clusters=[("c", {"server": "http://127.0.0.1:1"})],
        users=[("u", {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "gcloud"}})],
        contexts=[("x", {"cluster": "c"})],  # names no user
    )
    loaded = access.load(str(bare))
    assert isinstance(loaded.credentials, NoCredentials) and access.auth_headers(loaded) == {}
    assert access.ssl_context(loaded) is None


def test_an_exec_user_gets_an_exec_plugin(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "exec",
        current="x",
        clusters=[("c", {"server": "https://h"})],
        users=[("u", {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}})],
        contexts=[("x", {"cluster": "c", "user": "u"})],
    )
    plugin = access.load(str(path)).credentials
    assert isinstance(plugin, ExecPlugin) and plugin.spec["command"] == "aws" and plugin.base == tmp_path


def test_in_a_pod_the_service_account_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text(CA)
    monkeypatch.setenv(access.SERVICE_HOST_ENV, "fd00::1")
    monkeypatch.setenv(access.SERVICE_PORT_ENV, "443")
    loaded = access.in_cluster(tmp_path)
    assert loaded.host == "https://[fd00::1]:443" and loaded.ca_pem == CA
    assert access.auth_headers(loaded) == {"Authorization": "Bearer sa-token"}
    (tmp_path / "token").unlink()
    with pytest.raises(access.ConfigError, match="no ServiceAccount token at"):
        access.in_cluster(tmp_path)
    monkeypatch.delenv(access.SERVICE_HOST_ENV)
    with pytest.raises(access.ConfigError, match="not in a cluster"):
        access.in_cluster(tmp_path)
