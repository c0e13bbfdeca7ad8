"""The ``raybus`` command table: each edge role runs under a command of its own, ``raybus watcher
--roles`` still runs any set of them, and every command the table names can be parsed or imported."""

from __future__ import annotations

import importlib

import pytest

from services.cli.commands import COMMANDS, Service, Tool
from services.cli.main import parser, settings_for
from services.runtime.settings import ROLE_COMMANDS, ROLES_ENV, WATCHER_ROLES, WatcherRole


@pytest.mark.parametrize("role", WATCHER_ROLES)
def test_a_role_command_runs_its_role_only_whatever_the_environment_says(role: WatcherRole) -> None:
    name = ROLE_COMMANDS[role]
    service = COMMANDS[name]
    assert isinstance(service, Service)
    args = parser().parse_args([name, "--worker-id", "w1"])
    assert settings_for(service, args, {ROLES_ENV: "watch,apply,probe"}).kube.roles == (role,)


@pytest.mark.parametrize("role", WATCHER_ROLES)
def test_a_role_command_takes_no_roles_flag(role: WatcherRole, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args([ROLE_COMMANDS[role], "--roles", "watch"])
    assert "--roles" in capsys.readouterr().err


def test_the_watcher_command_runs_the_roles_it_is_given() -> None:
    service = COMMANDS["watcher"]
    assert isinstance(service, Service)
    assert settings_for(service, parser().parse_args(["watcher"]), {}).kube.roles == WATCHER_ROLES
    args = parser().parse_args(["watcher", "--roles", "probe,watch"])
    assert settings_for(service, args, {}).kube.roles == ("watch", "probe")
    assert settings_for(service, parser().parse_args(["watcher"]), {ROLES_ENV: "apply"}).kube.roles == ("apply",)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_names_what_runs_it(name: str) -> None:
    command = COMMANDS[name]
    if isinstance(command, Tool):
        assert callable(importlib.import_module(command.module).main)
        return
    module, function = command.runs.split(":")
    assert callable(getattr(importlib.import_module(module), function))
