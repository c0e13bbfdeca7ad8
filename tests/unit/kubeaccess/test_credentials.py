"""Credential sources: when each reads its secret again, and what a failure says (never the secret)."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
from pathlib import Path

import pytest

from kubeaccess.credentials import (
    EXEC_RENEW_BEFORE,
    TOKEN_FILE_REREAD,
    BasicAuth,
    BearerToken,
    CredentialError,
    ExecPlugin,
    TokenFile,
)
from schema.times import parse_time


def test_a_token_file_is_read_again_once_its_reread_interval_passed(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    source = TokenFile(path)
    assert source.header(0.0) == "Bearer first"
    path.write_text("second")
    assert source.header(TOKEN_FILE_REREAD - 1) == "Bearer first"
    assert source.header(TOKEN_FILE_REREAD) == "Bearer second"
    path.unlink()  # gone for a moment (a rotation): the last token stays
    assert source.header(3 * TOKEN_FILE_REREAD) == "Bearer second"


def test_a_token_file_that_never_was_readable_names_the_file_not_a_token(tmp_path: Path) -> None:
    with pytest.raises(CredentialError, match="cannot read the token file .*/missing"):
        TokenFile(tmp_path / "missing").header(0.0)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(CredentialError, match="is empty"):
        TokenFile(empty).header(0.0)


def test_fixed_credentials_and_their_repr_hide_the_secret() -> None:
    assert BearerToken("s3cret").header(0.0) == "Bearer s3cret"
    basic = BasicAuth("admin", "pa55")
    assert basic.header(0.0) == "Basic " + base64.b64encode(b"admin:pa55").decode()
    assert "s3cret" not in repr(BearerToken("s3cret")) and "pa55" not in repr(basic)


def _plugin(tmp_path: Path, body: str) -> Path:
    """An exec credential plugin: a Python script that logs each run to ``runs`` and prints ``body``."""
    script = tmp_path / "plugin.py"
    log_run = 'runs.write(json.dumps({"info": os.environ.get("KUBERNETES_EXEC_INFO"), "mode": os.environ.get("MODE")}))'
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "from pathlib import Path\n"
        'with (Path(__file__).parent / "runs").open("a") as runs:\n'
        f"    {log_run}\n"
        '    runs.write("\\n")\n'
        f"{textwrap.dedent(body)}\n"
    )
    script.chmod(0o755)
    return script


def _runs(tmp_path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in (tmp_path / "runs").read_text().splitlines()]


def test_an_exec_plugin_runs_again_only_when_its_token_is_about_to_expire(tmp_path: Path) -> None:
    _plugin(
        tmp_path,
        """print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
        "status": {"token": "tok-" + str(len(Path(__file__).parent.joinpath("runs").read_text().splitlines())),
                   "expirationTimestamp": "2030-01-01T00:00:00Z"}}))""",
    )
    spec = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "./plugin.py",  # relative with a separator: the kubeconfig's folder
        "env": [{"name": "MODE", "value": "test"}],
        "provideClusterInfo": True,
    }
    plugin = ExecPlugin(spec, tmp_path, {"server": "https://example:6443"})
    expiry = parse_time("2030-01-01T00:00:00Z")
    assert expiry is not None
    assert plugin.header(0.0) == "Bearer tok-1"
    assert plugin.header(expiry.timestamp() - EXEC_RENEW_BEFORE - 1) == "Bearer tok-1"
    assert plugin.header(expiry.timestamp() - EXEC_RENEW_BEFORE) == "Bearer tok-2"
    runs = _runs(tmp_path)
    assert len(runs) == 2 and runs[0]["mode"] == "test"
    info = json.loads(runs[0]["info"])
    assert info["kind"] == "ExecCredential" and info["spec"]["cluster"]["server"] == "https://example:6443"


def test_a_failing_exec_plugin_says_how_it_failed_and_never_what_it_printed(tmp_path: Path) -> None:
    _plugin(tmp_path, 'print("token-xyz"); print("login required", file=sys.stderr); sys.exit(3)')
    spec = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(tmp_path / "plugin.py")}
    with pytest.raises(CredentialError) as failed:
        ExecPlugin(spec, tmp_path).header(0.0)
    assert "exited with 3: login required" in str(failed.value) and "token-xyz" not in str(failed.value)
    _plugin(tmp_path, 'print("token-xyz")')
    with pytest.raises(CredentialError) as garbled:
        ExecPlugin(spec, tmp_path).header(0.0)
    assert "printed no JSON" in str(garbled.value) and "token-xyz" not in str(garbled.value)
    with pytest.raises(CredentialError, match="apiVersion 'v0'"):
        ExecPlugin({"apiVersion": "v0", "command": "x"}, tmp_path).header(0.0)
