"""The export file: one key's history, self-contained, versioned, JSON or YAML.

Layout (``format: raybus-replay-history``, ``format_version: 1``)::

    format, format_version      what this file is; a reader refuses a newer format_version
    schema_version              bus message schema of the exporting build (each message also has its own)
    logic_version               decide's LOGIC_VERSION of the exporting build
    raybus_version, exported_at, source, note
    operator_config             the operator configuration the exporter assumed (gates, switches, defaults)
    key                         {kind, namespace, name}
    window                      where the streams' retained data started (events/commands first seq/time,
                                truncated)
    inputs[]                    {seq, time, message}: the events-stream messages of the key, as on the bus
    decisions[]                 {seq, time, batch}: the CommandBatches of the key, as on the bus
    kv_seed[]                   {entry_kind, name, revision, value}: only for a truncated history

Messages are stored exactly as the bus carries them (msgspec's JSON of the contract structs), so a file
replays with no NATS, no cluster and no database, and old files keep decoding under the evolution rules
of ``schema.messages``. YAML files are the same document; they are read without YAML's implicit
timestamps so that strings inside Kubernetes objects stay strings.

Not here: reading the bus (``source``).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import yaml

from schema.config import RAYBUS_VERSION, OperatorConfig
from schema.keys import ReconcileKey
from schema.messages import SCHEMA_VERSION
from services.reconciler.worker.decide import LOGIC_VERSION
from services.replay.history import (
    HistoryWindow,
    KeyHistory,
    KvSeedEntry,
    RecordedDecision,
    RecordedInput,
    collector_paused,
)
from services.runtime.errors import PermanentError
from services.runtime.private import write_private

FORMAT: Final = "raybus-replay-history"
FORMAT_VERSION: Final = 1

FileFormat = Literal["json", "yaml"]


class HistoryFile(msgspec.Struct, frozen=True, kw_only=True):
    """The exported document (see the module docstring)."""

    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    schema_version: int = SCHEMA_VERSION
    logic_version: int = LOGIC_VERSION
    raybus_version: str = RAYBUS_VERSION
    exported_at: datetime | None = None
    source: str = ""
    note: str = ""
    operator_config: OperatorConfig | None = None
    key: ReconcileKey
    window: HistoryWindow = HistoryWindow()
    inputs: tuple[RecordedInput, ...] = ()
    decisions: tuple[RecordedDecision, ...] = ()
    kv_seed: tuple[KvSeedEntry, ...] = ()

    def history(self) -> KeyHistory:
        """The history the file holds."""
        return KeyHistory(
            key=self.key, inputs=self.inputs, decisions=self.decisions, window=self.window, kv_seed=self.kv_seed
        )


class _Header(msgspec.Struct, kw_only=True):
    format: str = ""
    format_version: int = 0


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it
_SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _PlainLoader(_SafeLoader):  # type: ignore[misc,valid-type]
    """A safe loader without the implicit timestamp type: ``2025-01-01T00:00:00Z`` stays a string."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _SafeLoader.yaml_implicit_resolvers.items()
}

_json_decoder: Final[msgspec.json.Decoder[HistoryFile]] = msgspec.json.Decoder(HistoryFile)


def to_file(
    history: KeyHistory,
    *,
    exported_at: datetime,
    operator_config: OperatorConfig | None = None,
    source: str = "",
    note: str = "",
) -> HistoryFile:
    """Wrap a history in the export document."""
    return HistoryFile(
        exported_at=exported_at,
        source=source,
        note=note,
        operator_config=operator_config,
        key=history.key,
        window=history.window,
        inputs=history.inputs,
        decisions=history.decisions,
        kv_seed=history.kv_seed,
    )


def format_for(path: Path) -> FileFormat:
    """YAML for ``.yaml``/``.yml`` files, JSON otherwise."""
    return "yaml" if path.suffix.lower() in (".yaml", ".yml") else "json"


def dumps(document: HistoryFile, fmt: FileFormat = "json") -> bytes:
    """Serialize an export document (JSON: one item per line-ish, indented by one space)."""
    if fmt == "yaml":
        plain = msgspec.to_builtins(document)
        return yaml.dump(plain, Dumper=_SafeDumper, sort_keys=False, allow_unicode=True, width=120).encode()
    return msgspec.json.format(msgspec.json.encode(document), indent=1) + b"\n"


def _check_header(header: _Header, where: str) -> None:
    if header.format != FORMAT:
        raise PermanentError(f"{where}: not a raybus replay history (format {header.format!r})")
    if header.format_version > FORMAT_VERSION:
        raise PermanentError(
            f"{where}: format_version {header.format_version} is newer than this raybus reads ({FORMAT_VERSION})"
        )


def loads(data: bytes, *, where: str = "history") -> HistoryFile:
    """Parse an export document (JSON or YAML, detected from the content).

    Raises:
        PermanentError: not a history file, a newer format, or a malformed one.
    """
    with collector_paused():
        return _loads(data, where)


def _loads(data: bytes, where: str) -> HistoryFile:
    stripped = data.lstrip()
    try:
        if stripped.startswith(b"{"):
            _check_header(msgspec.json.decode(data, type=_Header), where)
            return _json_decoder.decode(data)
        plain: Any = yaml.load(data, Loader=_PlainLoader)  # a SafeLoader subclass
        if not isinstance(plain, dict):
            raise PermanentError(f"{where}: not a raybus replay history")
        _check_header(msgspec.convert(plain, _Header), where)
        document: HistoryFile = msgspec.convert(plain, HistoryFile)
        return document
    except (msgspec.DecodeError, msgspec.ValidationError, yaml.YAMLError) as exc:
        raise PermanentError(f"{where}: malformed history file: {exc}") from exc


def write_history(path: Path, document: HistoryFile, fmt: FileFormat | None = None) -> None:
    """Write an export document (format from ``fmt`` or the file name), atomically, readable by its
    owner only (it holds the key's objects as the watcher saw them)."""
    write_private(path, dumps(document, fmt or format_for(path)))


def read_history_file(path: Path) -> HistoryFile:
    """Read an export document.

    Raises:
        PermanentError: unreadable, not a history file, or a newer format.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PermanentError(f"{path}: {exc}") from exc
    return loads(data, where=str(path))
