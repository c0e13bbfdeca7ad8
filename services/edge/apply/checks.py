"""The authority and content checks of one batch's commands, each made once, and whether any passes.

Role: the applier runs a command only if ``authorize`` allows it for its key and its content follows from
the key's custom resource (``provenance``). The verdicts are needed twice: per command as it runs, and
before the batch runs, to tell whether the batch is refused whole. A batch refused whole changed nothing,
so it is no decision applied and does not raise its key's floor of ``freshness``: a forged batch claiming
the current revision would otherwise have the reconciler's own decisions made just before it refused
as replays.

Invariants: pure (no I/O, clock or randomness); each command is judged once, on the facts as they are
when it is first asked about.

Not here: the checks themselves (``authorize``, ``provenance``), judging replays (``freshness``).
"""

from __future__ import annotations

from collections.abc import Sequence

from schema.config import OperatorConfig
from schema.messages import Command, CommandBatch, PatchStatus
from services.edge.apply.authorize import Allowed, Facts, Gone, Verdict, authorize
from services.edge.apply.provenance import ContentCheck


class BatchChecks:
    """The checks of one batch's commands, by index.

    Args:
        batch: the batch.
        facts: what the watcher knows.
        config: the operator configuration the reconcilers run with.
        written: the status patches this applier wrote for the key lately (``freshness.WrittenStatus``).
    """

    def __init__(
        self, batch: CommandBatch, facts: Facts, config: OperatorConfig, written: Sequence[PatchStatus] = ()
    ) -> None:
        self._batch = batch
        self._facts = facts
        self._content = ContentCheck(batch.key, facts, config, (*written, *batch.commands))
        self._verdicts: dict[int, Verdict] = {}
        self._problems: dict[int, str] = {}
        self.replay = ""
        """Why the batch as a whole must not run: a replayed decision (``freshness``, once it judged)."""

    def authority(self, index: int, command: Command) -> Verdict:
        """Whether the batch's key may send its ``index``-th command (``authorize``)."""
        verdict = self._verdicts.get(index)
        if verdict is None:
            verdict = self._verdicts[index] = authorize(self._batch.key, command, self._facts)
        return verdict

    def _problem(self, index: int, command: Command) -> str:
        """Why the ``index``-th command's content does not follow from the custom resource ("" if it does)."""
        problem = self._problems.get(index)
        if problem is None:
            problem = self._problems[index] = self._content.problem(command)
        return problem

    def refusal(self, index: int, command: Command) -> str:
        """Why the ``index``-th command must not run although its key may send it: its batch is a replay,
        or its content does not follow from the custom resource ("" when neither)."""
        return self.replay or self._problem(index, command)

    def refused_whole(self) -> bool:
        """Whether the batch has commands and every one is refused by one of the checks (the checks stop at
        the first command that passes)."""
        commands = self._batch.commands
        return bool(commands) and not any(self._passes(index, command) for index, command in enumerate(commands))

    def _passes(self, index: int, command: Command) -> bool:
        verdict = self.authority(index, command)
        if isinstance(verdict, Gone):
            return True  # not run, but not refused: its target went away
        return isinstance(verdict, Allowed) and not self._problem(index, command)
