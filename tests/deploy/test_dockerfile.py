"""The Dockerfile agrees with the project and the manifests (no image is built here: no daemon)."""

from __future__ import annotations

import json
import re
import tomllib

from tests.deploy.render import ROOT, TREES, render

DOCKERFILE = (ROOT / "Dockerfile").read_text()
INSTRUCTIONS = [line.strip() for line in DOCKERFILE.splitlines() if line.strip() and not line.startswith("#")]


def _all(keyword: str) -> list[str]:
    return [line.split(None, 1)[1] for line in INSTRUCTIONS if line.split(None, 1)[0] == keyword]


def test_multi_stage_slim_python_pinned_by_digest() -> None:
    assert _all("FROM") == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    [image] = [arg.split("=", 1)[1] for arg in _all("ARG") if arg.startswith("PYTHON_IMAGE=")]
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", image)
    assert any(line.startswith("--from=build /opt/raybus") for line in _all("COPY"))


def test_runs_as_the_manifests_uid() -> None:
    assert _all("USER") == ["65532:65532"]
    for tree in TREES:
        for obj in render(tree):
            if obj["kind"] in {"Deployment", "Job"}:
                assert obj["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 65532


def test_entrypoint_is_the_cli() -> None:
    assert json.loads(_all("ENTRYPOINT")[-1]) == ["raybus"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "raybus" in scripts


def test_every_package_is_copied() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    copied = {line.split()[0] for line in _all("COPY") if not line.startswith("--from")}
    assert set(packages) <= copied
    assert "pyproject.toml" in copied


def test_build_context_excludes_local_state() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", "tests", "**/__pycache__", ".raybus"} <= ignored
