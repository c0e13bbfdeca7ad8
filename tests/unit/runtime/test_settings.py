"""Settings from flags and environment: the applier's API budget (KubeRay's --qps / --burst), the status
API's authentication."""

from __future__ import annotations

import argparse

import pytest

from services.cli.flags import add_kube, add_liveness, add_status, settings_from
from services.runtime.errors import PermanentError
from services.runtime.settings import load_settings


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_kube(parser)
    return parser.parse_args(list(argv))


def test_kuberay_defaults() -> None:
    kube = load_settings({}).kube
    assert (kube.qps, kube.burst) == (100.0, 200)


def test_environment_then_flags() -> None:
    env = {"RAYBUS_QPS": "250", "RAYBUS_BURST": "500"}
    assert (load_settings(env).kube.qps, load_settings(env).kube.burst) == (250.0, 500)
    kube = settings_from(_parse("--qps", "0", "--burst", "10"), env).kube
    assert (kube.qps, kube.burst) == (0.0, 10)


def test_the_drift_check_interval_from_the_environment_then_the_flag() -> None:
    assert load_settings({}).kube.check_interval == 300.0
    env = {"RAYBUS_CHECK_INTERVAL": "60"}
    assert load_settings(env).kube.check_interval == 60.0
    assert settings_from(_parse("--check-interval", "0"), env).kube.check_interval == 0.0
    with pytest.raises(PermanentError, match="RAYBUS_CHECK_INTERVAL"):
        load_settings({"RAYBUS_CHECK_INTERVAL": "-5"})


@pytest.mark.parametrize("value", ["fast", "-1"])
def test_bad_qps_is_named(value: str) -> None:
    with pytest.raises(PermanentError, match="RAYBUS_QPS"):
        load_settings({"RAYBUS_QPS": value})


def test_status_auth_is_off_unless_the_flag_or_its_variable_says_so() -> None:
    parser = argparse.ArgumentParser()
    add_status(parser)
    assert load_settings({}).status.auth.enabled is False
    assert settings_from(parser.parse_args([]), {}).status.auth.enabled is False
    assert load_settings({"RAYBUS_STATUS_AUTH": "true"}).status.auth.enabled is True
    assert settings_from(parser.parse_args(["--auth"]), {}).status.auth.enabled is True
    with pytest.raises(PermanentError, match="RAYBUS_STATUS_AUTH"):
        load_settings({"RAYBUS_STATUS_AUTH": "maybe"})


def test_resync_and_stall_bounds_from_environment_then_flags() -> None:
    parser = argparse.ArgumentParser()
    add_liveness(parser)
    assert (load_settings({}).partitions.resync_period, load_settings({}).partitions.stall_after) == (300.0, 120.0)
    env = {"RAYBUS_RESYNC_PERIOD": "600", "RAYBUS_STALL_AFTER": "0"}
    assert (load_settings(env).partitions.resync_period, load_settings(env).partitions.stall_after) == (600.0, 0.0)
    partitions = settings_from(parser.parse_args(["--resync-period", "0", "--stall-after", "30"]), env).partitions
    assert (partitions.resync_period, partitions.stall_after) == (0.0, 30.0)
    with pytest.raises(PermanentError, match="RAYBUS_RESYNC_PERIOD"):
        load_settings({"RAYBUS_RESYNC_PERIOD": "-5"})
    with pytest.raises(PermanentError, match="--resync-period"):
        settings_from(parser.parse_args(["--resync-period", "-1"]), {})


def test_result_batches_are_off_unless_the_variable_says_so() -> None:
    assert load_settings({}).bus.result_batches is False
    assert settings_from(_parse(), {"RAYBUS_RESULT_BATCHES": "true"}).bus.result_batches is True
    with pytest.raises(PermanentError, match="RAYBUS_RESULT_BATCHES"):
        load_settings({"RAYBUS_RESULT_BATCHES": "sometimes"})
