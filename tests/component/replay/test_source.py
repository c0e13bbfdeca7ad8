"""``raybus replay`` against a real nats-server: reading a key's history with direct gets, live replay,
export, ``--all``, and a history whose oldest events aged out (purged) of the stream."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client

from schema import subjects
from schema.config import OperatorConfig
from schema.keys import ReconcileKey
from services.replay import source
from services.replay.archive import read_history_file
from services.replay.history import KeyHistory
from services.replay.replayer import Replayer
from services.replay.source import read_history
from services.runtime import directget
from services.runtime.endpoints import write_endpoints
from tests.component.replay.conftest import publish_history
from tests.fixtures.nats import NatsServer, free_port
from tests.unit.replay.clirun import replay_cli_async
from tests.unit.replay.conftest import REPLAYS, load
from tests.unit.replay.test_divergence import slower_requeue

LIFECYCLE = REPLAYS / "raycluster-sample-lifecycle.json"
RECREATED = REPLAYS / "raycluster-recreated.json"
SCALING = REPLAYS / "raycluster-scaling.json"  # recorded before RECREATED, in the same pipeline


def url(nc: Client) -> str:
    server = nc.connected_url
    assert server is not None
    return f"nats://{server.hostname}:{server.port}"


def same_messages(read: KeyHistory, recorded: KeyHistory) -> None:
    def strip(history: KeyHistory) -> tuple[list[bytes], list[bytes]]:
        inputs = [msgspec.json.encode(r.message) for r in history.inputs]
        batches = [msgspec.json.encode(msgspec.structs.replace(d.batch, inputs=())) for d in history.decisions]
        return inputs, batches

    assert strip(read) == strip(recorded)


async def test_read_history_returns_what_was_recorded_and_replays(bus: Client) -> None:
    recorded = load(LIFECYCLE).history()
    await publish_history(bus, recorded)
    history = await read_history(bus, recorded.key)
    same_messages(history, recorded)
    assert [r.seq for r in history.inputs] == sorted(r.seq for r in history.inputs)
    assert not history.window.truncated and history.window.events_first_seq == 1
    assert history.kv_seed == ()
    result = Replayer().replay_history(history)
    assert [s.verdict for s in result.steps] == ["match"] * len(recorded.decisions)


async def test_direct_gets_page_through_long_histories(bus: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = load(LIFECYCLE).history()
    await publish_history(bus, recorded)
    monkeypatch.setattr(directget, "DIRECT_BATCH", 7)
    same_messages(await read_history(bus, recorded.key), recorded)


async def test_other_keys_are_not_read(bus: Client) -> None:
    await publish_history(bus, load(SCALING).history())
    await publish_history(bus, load(RECREATED).history())
    history = await read_history(bus, load(RECREATED).key)
    assert {r.message.key for r in history.inputs} == {load(RECREATED).key}
    same_messages(history, load(RECREATED).history())
    nothing = await read_history(bus, ReconcileKey(kind="RayJob", namespace="default", name="replay-scaling"))
    assert nothing.inputs == () and nothing.decisions == ()


async def test_cli_live_replay_export_and_file_replay(bus: Client, tmp_path: Path) -> None:
    await publish_history(bus, load(LIFECYCLE).history())
    live = await replay_cli_async(["RayCluster", "default/replay-lifecycle", "--nats-url", url(bus)])
    assert live.code == 0, live.err
    assert "history complete" in live.out and "0 diverged" in live.out
    changed = await replay_cli_async(
        ["RayCluster", "default/replay-lifecycle", "--nats-url", url(bus)], reconcilers={"RayCluster": slower_requeue}
    )
    assert changed.code == 1 and "DIVERGED" in changed.out
    for name in ("export.json", "export.yaml"):
        out = tmp_path / name
        export = await replay_cli_async(
            [
                "export",
                "rayclusters",
                "default/replay-lifecycle",
                "-o",
                str(out),
                "--nats-url",
                url(bus),
                "--note",
                "hi",
            ]
        )
        assert export.code == 0, export.err
        assert f"wrote {out}" in export.out
        document = read_history_file(out)
        assert document.note == "hi" and document.operator_config == OperatorConfig()
        assert document.source.startswith("nats://127.0.0.1:")
        same_messages(document.history(), load(LIFECYCLE).history())
        replayed = await replay_cli_async(["--from-file", str(out)])
        assert replayed.code == 0 and "0 diverged" in replayed.out
    missing = await replay_cli_async(["RayCluster", "default/nope", "--nats-url", url(bus)])
    assert missing.code == 2 and "no recorded decision for RayCluster/default/nope" in missing.err
    nothing = await replay_cli_async(
        ["export", "RayCluster", "default/nope", "-o", str(tmp_path / "n.json"), "--nats-url", url(bus)]
    )
    assert nothing.code == 2 and not (tmp_path / "n.json").exists()


async def test_all_replays_every_key_with_recent_activity(bus: Client) -> None:
    histories = [load(SCALING).history(), load(RECREATED).history()]
    for history in histories:
        await publish_history(bus, history)
    keys = await source.active_keys(bus, since=None)
    assert [str(k) for k in keys] == ["RayCluster/default/replay-recreated", "RayCluster/default/replay-scaling"]
    # Decisions are dated by their recorded `now`, fixed when the files were recorded: the window
    # starts at the recordings' first decision, not at an age relative to today.
    first = min(d.batch.issued_at for h in histories for d in h.decisions) - timedelta(seconds=1)
    since = first.strftime("%Y-%m-%dT%H:%M:%SZ")
    run = await replay_cli_async(["--all", "--since", since, "--nats-url", url(bus)], now=_now())
    assert run.code == 0, run.err
    assert "replayed 2 key(s)" in run.out and "0 key(s) diverged" in run.out
    assert "RayCluster  2 key(s)" in run.out
    changed = await replay_cli_async(
        ["--all", "--since", since, "--nats-url", url(bus)], reconcilers={"RayCluster": slower_requeue}, now=_now()
    )
    assert changed.code == 1
    assert "2 key(s) diverged" in changed.out
    assert "by rule:" in changed.out and "diverged keys:" in changed.out
    assert "RayCluster/default/replay-scaling: step(s) " in changed.out
    future = await replay_cli_async(["--all", "--since", "2999-01-01T00:00:00Z", "--nats-url", url(bus)], now=_now())
    assert future.code == 0 and "replayed 0 key(s)" in future.out


def _now() -> datetime:
    return datetime.now(UTC)  # the stream's storage times are the server's clock


async def test_a_history_whose_oldest_events_aged_out_is_not_silently_partial(bus: Client) -> None:
    recorded = load(LIFECYCLE).history()
    await publish_history(bus, recorded)
    full = await read_history(bus, recorded.key)
    cut = full.inputs[len(full.inputs) // 2].seq
    await bus.jetstream().purge_stream(subjects.EVENTS_STREAM, seq=cut)  # as max age would
    history = await read_history(bus, recorded.key)
    assert history.window.truncated and history.window.events_first_seq == cut
    assert history.inputs[0].seq == cut
    assert {(e.entry_kind, e.name) for e in history.kv_seed} >= {("RayCluster", "replay-lifecycle")}
    result = Replayer().replay_history(history)
    assert result.divergences == ()
    verdicts = [s.verdict for s in result.steps]
    assert "unverifiable" in verdicts and "match" in verdicts
    # Unverifiable exactly until the first revision whose snapshot the retained data determines.
    assert verdicts == ["unverifiable" if s.snapshot_revision < result.complete_from else "match" for s in result.steps]
    missing = [s for s in result.steps if s.missing_inputs]
    assert missing and all(seq < cut for s in missing for seq in s.missing_inputs)
    run = await replay_cli_async(["RayCluster", "default/replay-lifecycle", "--nats-url", url(bus)])
    assert run.code == 0, run.err
    assert "history TRUNCATED" in run.out and f"complete from KV revision {result.complete_from}" in run.out
    assert "unverifiable (inputs aged out)" in run.out and "no longer in the stream" in run.out


async def test_cli_finds_the_stack_from_the_state_dir(bus: Client, tmp_path: Path) -> None:
    await publish_history(bus, load(LIFECYCLE).history())
    write_endpoints(tmp_path, {"nats_url": url(bus)})
    found = await replay_cli_async(["RayCluster", "default/replay-lifecycle"], env={"RAYBUS_STATE_DIR": str(tmp_path)})
    assert found.code == 0, found.err
    assert "0 diverged" in found.out
    flagged = await replay_cli_async(["RayCluster", "default/replay-lifecycle", "--state-dir", str(tmp_path)])
    assert flagged.code == 0, flagged.err


async def test_cli_against_a_nats_without_raybus_is_one_clear_line(nats_server: NatsServer) -> None:
    wrong = await replay_cli_async(["rayjob", "default/rayjob-sample", "--nats-url", nats_server.url])
    assert wrong.code == 2
    assert wrong.out == ""
    assert wrong.err.count("\n") == 1
    assert wrong.err.startswith(f"raybus replay: NATS at {nats_server.url} has no raybus streams")
    assert "Traceback" not in wrong.err


async def test_cli_against_no_server_is_one_clear_line() -> None:
    gone = await replay_cli_async(
        ["rayjob", "default/rayjob-sample", "--nats-url", f"nats://127.0.0.1:{free_port()}", "--connect-timeout", "1"]
    )
    assert gone.code == 2
    assert gone.err.count("\n") == 1 and gone.err.startswith("raybus replay: cannot connect to NATS")


async def test_a_kv_seed_larger_than_one_multi_last_answer_is_read_whole(bus: Client) -> None:
    """The server answers a multi_last with at most 1,024 keys; a 2,000-worker cluster's seed has more, and
    its delete markers keep their revisions."""
    key = ReconcileKey(kind="RayCluster", namespace="big", name="c")
    kv = await bus.jetstream().key_value(subjects.OBJECTS_BUCKET)
    await kv.put(subjects.entry_key(key, "RayCluster", "c"), b'{"kind": "RayCluster"}')
    for i in range(1100):
        await kv.put(subjects.entry_key(key, "Pod", f"w-{i}"), msgspec.json.encode({"i": i}))
    last = await kv.put(subjects.entry_key(key, "Pod", "w-last"), b"{}")
    await kv.delete(subjects.entry_key(key, "Pod", "w-3"))
    rewritten = await kv.put(subjects.entry_key(key, "Pod", "w-4"), msgspec.json.encode({"i": "again"}))
    seed = {(e.entry_kind, e.name): e for e in await source.read_kv_seed(bus, key)}
    assert len(seed) == 1102
    assert seed[("Pod", "w-3")].value is None and last < seed[("Pod", "w-3")].revision < rewritten
    assert seed[("Pod", "w-4")].value == {"i": "again"} and seed[("Pod", "w-4")].revision == rewritten
    assert seed[("RayCluster", "c")].value == {"kind": "RayCluster"}
