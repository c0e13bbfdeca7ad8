"""Record the golden histories of this folder from real pipeline runs (kubesim + NATS + services).

Run: ``.venv/bin/python -m tests.replays.record [DIR]`` (about 30 s). It runs the scenarios of
``scenarios.py`` in a pipeline with default settings and writes one export file per key, in ``raybus replay export``'s
format. Files of one pipeline share its KV revisions, in recording order (the component tests put them
back on a bus at those revisions). Re-record only when a scenario changes; a reconcile change that
alters recorded commands must bump ``LOGIC_VERSION`` and be gated, never be "fixed" by re-recording
(replay must keep telling a logic change from a bug).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from schema.keys import ReconcileKey
from services.replay.archive import to_file, write_history
from services.replay.replayer import Replayer
from services.runtime.settings import RaybusSettings
from tests.e2e.pipeline import Pipeline, running_pipeline
from tests.replays import scenarios

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Recording:
    file_stem: str
    note: str
    run: Callable[[Pipeline], Awaitable[ReconcileKey]]
    incarnations: int = 1


DEFAULT_SETTINGS: tuple[Recording, ...] = (
    Recording(
        "raycluster-scaling",
        "sample: apply (1 worker), scale to 4, 2, 0, delete; in-flight withholding on",
        scenarios.scaling,
    ),
    Recording(
        "raycluster-recreated",
        "sample created, deleted, created again (new uid), scaled to 2, deleted",
        scenarios.recreated,
        incarnations=2,
    ),
    Recording(
        "rayjob-sample",
        "RayJob sample: cluster, submitter Job, dashboard observation SUCCEEDED, Complete, deleted",
        scenarios.rayjob,
    ),
    Recording(
        "rayservice-sample",
        "RayService sample: pending cluster up to a running head (no serve observations yet), deleted",
        scenarios.rayservice,
    ),
    Recording(
        "raycluster-sample-lifecycle",
        "sample: apply (1 worker), scale to 3, suspend, resume, scale to 1, delete",
        scenarios.lifecycle,
    ),
    Recording(
        "raycluster-autoscaler-lifecycle",
        "autoscaler sample (0 workers): scale to 3, suspend, resume, delete",
        lambda p: scenarios.lifecycle(
            p, name="replay-autoscaler", file_name="ray-cluster.autoscaler.yaml", scale_down=False
        ),
    ),
)


async def record_in_pipeline(
    out_dir: Path, recordings: tuple[Recording, ...], hook: Callable[[RaybusSettings], RaybusSettings] | None
) -> list[Path]:
    """Run ``recordings`` in one pipeline and export each key's history into ``out_dir``."""
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with running_pipeline(Path(tmp), settings_hook=hook) as p:
            for recording in recordings:
                key = await recording.run(p)
                history = await scenarios.settled_history(p, key, incarnations=recording.incarnations)
                Replayer(config=p.settings.operator).replay_history(history)  # never record a diverging run
                document = to_file(
                    history,
                    exported_at=datetime.now(UTC),
                    operator_config=p.settings.operator,
                    source="tests/replays/record.py (kubesim pipeline)",
                    note=recording.note,
                )
                path = out_dir / f"{recording.file_stem}.json"
                write_history(path, document)
                written.append(path)
                withheld = sum(len(d.batch.suppressed) for d in history.decisions)
                inputs, decisions = len(history.inputs), len(history.decisions)
                print(f"{path.name}: {inputs} inputs, {decisions} decisions, {withheld} withheld")
    return written


async def record(out_dir: Path) -> list[Path]:
    """Every recording, in its pipeline."""
    return [
        *await record_in_pipeline(out_dir, DEFAULT_SETTINGS, None),
    ]


def main() -> int:
    asyncio.run(record(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
