"""``raybus replay``: a key's recorded inputs through today's ``reconcile``, compared with what was decided.

Public API (temporal's replayer as the model): :class:`Replayer` with ``replay_history``,
``replay_histories``, ``replay_iterator`` and ``iter_steps``; results as frozen :class:`ReplayStep` /
:class:`ReplayResult`; divergences as ``services.runtime.errors.ReplayDivergence``; histories as
:class:`KeyHistory`, read from the bus by ``source.read_history`` or from a file by
``archive.read_history_file``.

Module map: ``history`` (data), ``rebuild`` (snapshots), ``replayer`` (decide + compare), ``compare``
(diffs), ``render`` (text), ``archive`` (file format), ``source`` (NATS), ``cli``.

Rejected: a durable consumer to read history (it would change the bus and leave state behind); replaying
through a live worker (replay must be possible with no NATS at all); rebuilding each snapshot from
scratch (quadratic in the history length, see ``rebuild``); treating changed rules as divergences (they
explain decisions, they are not effects).
"""

from services.replay.archive import HistoryFile, read_history_file, write_history
from services.replay.history import KeyHistory, RecordedDecision, RecordedInput
from services.replay.replayer import Replayer, ReplayResult, ReplayResults, ReplayStep, StepFilter
from services.runtime.errors import ReplayDivergence

__all__ = [
    "HistoryFile",
    "KeyHistory",
    "RecordedDecision",
    "RecordedInput",
    "ReplayDivergence",
    "ReplayResult",
    "ReplayResults",
    "ReplayStep",
    "Replayer",
    "StepFilter",
    "read_history_file",
    "write_history",
]
