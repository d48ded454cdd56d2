"""A GPU that stops reporting while its node still reports becomes an event, and so does its
return (with the gap); a node that stops reporting as a whole is not a GPU event."""

from __future__ import annotations

from gpuwarden.collect import CollectLoop
from gpuwarden.collectors.silence import SilenceWatch
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Batch, GpuId, Sample

A0, A1 = GpuId("a", 0, "GPU-a0"), GpuId("a", 1, "GPU-a1")
B0 = GpuId("b", 0, "GPU-b0")
SWAPPED = GpuId("a", 1, "GPU-a1-new")


def batch(ts: float, *gpus: GpuId) -> Batch:
    return Batch(ts, tuple(Sample(ts, g, {"gpu_temp_c": 50.0}) for g in gpus))


def kinds(b: Batch) -> list[tuple[str, str, int | None]]:
    return [(e.kind, e.gpu.uuid, e.code) for e in b.events]


def test_a_gpu_silent_while_its_node_reports_is_an_event_and_so_is_its_return():
    watch = SilenceWatch()
    assert kinds(watch.observe(batch(0, A0, A1, B0))) == []
    missing = watch.observe(batch(60, A0, B0))
    assert kinds(missing) == [("gpu_missing", "GPU-a1", None)]
    assert "no reading since 0 while its node reports" in missing.events[0].detail
    assert kinds(watch.observe(batch(120, A0, B0))) == []  # said once per silence
    back = watch.observe(batch(300, A0, A1, B0))
    assert kinds(back) == [("gpu_reporting", "GPU-a1", 300)]
    assert back.events[0].detail == "silent for 300 s"


def test_a_whole_node_going_quiet_is_not_a_gpu_event():
    watch = SilenceWatch()
    watch.observe(batch(0, A0, A1, B0))
    assert kinds(watch.observe(batch(60, B0))) == []  # node a: an endpoint or host problem
    assert kinds(watch.observe(batch(120, A0, A1, B0))) == []
    assert kinds(watch.observe(Batch(180))) == []  # an empty batch says nothing


def test_a_swapped_board_is_not_a_silence():
    watch = SilenceWatch()
    watch.observe(batch(0, A0, A1))
    assert kinds(watch.observe(batch(60, A0, SWAPPED))) == []


class Scripted:
    url = "test://scripted"

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches

    def collect(self) -> Batch:
        return self.batches.pop(0)

    def close(self) -> None:
        pass


def test_the_collect_loop_stores_the_events(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    loop = CollectLoop(
        Scripted([batch(0, A0, A1), batch(60, A0), batch(120, A0, A1)]),
        store,
        interval_s=60,
        clock=lambda: 0.0,
        sleep=lambda s: None,
    )
    loop.run(iterations=3)
    events = store.read_events()
    assert list(events["kind"]) == ["gpu_missing", "gpu_reporting"]
    assert list(events["uuid"]) == ["GPU-a1", "GPU-a1"]
    assert int(events["code"].iloc[1]) == 120
