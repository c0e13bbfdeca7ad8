"""Record the golden histories of this folder from real pipeline runs (kubesim + NATS + services).

Run: ``.venv/bin/python -m tests.replays.record`` (about 20 s). It runs the scenarios of
``scenarios.py`` and writes one export file per key (``raybus replay export``'s format). Re-record only
when the scenario changes; a reconcile change that alters recorded commands must bump ``LOGIC_VERSION``
and be gated, never be "fixed" by re-recording (house rule 7).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from schema.config import OperatorConfig
from services.replay.archive import to_file, write_history
from services.replay.replayer import Replayer
from tests.e2e.pipeline import running_pipeline
from tests.replays import scenarios

HERE = Path(__file__).resolve().parent


async def record(out_dir: Path) -> list[Path]:
    """Run every scenario in one pipeline and export each key's history into ``out_dir``."""
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with running_pipeline(Path(tmp)) as p:
            runs = [
                (
                    "raycluster-sample-lifecycle",
                    "sample: apply (1 worker), scale to 3, suspend, resume, scale to 1, delete",
                    scenarios.lifecycle(p),
                    1,
                ),
                (
                    "raycluster-autoscaler-lifecycle",
                    "autoscaler sample (0 workers): scale to 3, suspend, resume, delete",
                    scenarios.lifecycle(
                        p, name="replay-autoscaler", file_name="ray-cluster.autoscaler.yaml", scale_down=False
                    ),
                    1,
                ),
                (
                    "raycluster-recreated",
                    "sample created, deleted, created again (new uid), scaled to 2, deleted",
                    scenarios.recreated(p),
                    2,
                ),
            ]
            for file_stem, note, scenario, incarnations in runs:
                key = await scenario
                history = await scenarios.settled_history(p, key, incarnations=incarnations)
                Replayer(config=p.settings.operator).replay_history(history)  # never record a diverging run
                document = to_file(
                    history,
                    exported_at=datetime.now(UTC),
                    operator_config=p.settings.operator or OperatorConfig(),
                    source="tests/replays/record.py (kubesim pipeline)",
                    note=note,
                )
                path = out_dir / f"{file_stem}.json"
                write_history(path, document)
                written.append(path)
                print(f"{path.name}: {len(history.inputs)} inputs, {len(history.decisions)} decisions")
    return written


def main() -> int:
    asyncio.run(record(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
