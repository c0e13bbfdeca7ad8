"""``raybus`` entry point: parses the command line and runs the command :data:`commands.COMMANDS` names.

A service's module is imported only when its command runs (the table names it by module).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import sys
from collections.abc import Sequence

from services.cli import flags
from services.cli.commands import COMMANDS, Service, Tool
from services.runtime.settings import RaybusSettings


def parser() -> argparse.ArgumentParser:
    """The command line of every service (the tools parse their own)."""
    top = argparse.ArgumentParser(
        prog="raybus", description="The KubeRay operator as an event-sourced controller on NATS JetStream."
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        if isinstance(command, Tool):
            sub.add_parser(name, help=command.help, add_help=False)
            continue
        service = sub.add_parser(name, help=command.help)
        for add in command.flags:
            add(service)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run a raybus command; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS.get(args_list[0]) if args_list else None
    if isinstance(command, Tool):
        return _run_tool(args_list[0], command, args_list[1:])
    args = parser().parse_args(args_list)
    service = COMMANDS[args.command]
    assert isinstance(service, Service)
    return asyncio.run(_serve(args.command, service, args))


def _run_tool(name: str, tool: Tool, argv: list[str]) -> int:
    module = importlib.import_module(tool.module)
    try:
        return int(module.main(argv))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a tool's last resort: one line, never a traceback
        print(f"raybus {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def settings_for(service: Service, args: argparse.Namespace, env: dict[str, str] | None = None) -> RaybusSettings:
    """A service's settings: the environment's, its flags, and an edge command's own roles over both."""
    settings = flags.settings_from(args, env)
    if service.roles:
        settings = dataclasses.replace(settings, kube=dataclasses.replace(settings.kube, roles=service.roles))
    return settings


async def _serve(name: str, service: Service, args: argparse.Namespace) -> int:
    for module in service.without:
        sys.modules.setdefault(module, None)  # type: ignore[arg-type]  # None: importing it fails
    from services.runtime.errors import RaybusError
    from services.runtime.lifecycle import run_service

    try:
        settings = settings_for(service, args)
    except RaybusError as exc:
        print(f"raybus {name}: {exc}", file=sys.stderr)
        return 2
    module_name, function = service.runs.split(":")
    run = getattr(importlib.import_module(module_name), function)
    return await run_service(name, settings, lambda stop, health: run(settings, stop, health))


if __name__ == "__main__":
    raise SystemExit(main())
