"""The collection loop keeps going through collector crashes and store outages, losing nothing."""

from gpuwarden.collect import CollectLoop
from gpuwarden.errors import CollectorTimeout, StoreError
from gpuwarden.store import open_store
from gpuwarden.telemetry import Batch, GpuId, Sample

GPU = GpuId("n1", 0, "GPU-1111", "00000000:18:00.0", "NVIDIA H100 80GB HBM3")


class FlakyCollector:
    """Answers with one sample per call, except the calls listed in ``fail_on``."""

    url = "test://flaky"

    def __init__(self, fail_on):
        self.calls = 0
        self.fail_on = fail_on

    def collect(self):
        self.calls += 1
        if self.calls in self.fail_on:
            if self.calls % 2:
                raise CollectorTimeout("nvidia-smi did not answer in 10 s")
            raise RuntimeError("a bug in a collector")
        return Batch(
            ts=float(self.calls), samples=(Sample(float(self.calls), GPU, {"gpu_temp_c": 40.0}),)
        )

    def close(self):
        pass


class OutageStore:
    """A real SQLite store that refuses writes while ``down`` is true."""

    def __init__(self, store):
        self.inner = store
        self.url = store.url
        self.down = False

    def write_batch(self, batch):
        if self.down:
            raise StoreError("database is locked")
        self.inner.write_batch(batch)

    def compact(self, now):
        self.inner.compact(now)


def test_loop_survives_collector_errors():
    store = open_store("sqlite:///:memory:")
    loop = CollectLoop(FlakyCollector(fail_on={2, 3}), store, interval_s=0, sleep=lambda s: None)
    stats = loop.run(5)
    assert stats.ticks == 5 and stats.collect_errors == 2
    assert sorted(store.read_samples()["ts"]) == [1.0, 4.0, 5.0]


def test_store_outage_loses_nothing():
    store = OutageStore(open_store("sqlite:///:memory:"))
    loop = CollectLoop(FlakyCollector(fail_on=set()), store, interval_s=0, sleep=lambda s: None)
    loop.tick()
    store.down = True
    loop.tick()
    loop.tick()
    assert loop.stats.store_errors == 2
    store.down = False
    loop.tick()
    assert sorted(store.inner.read_samples()["ts"]) == [1.0, 2.0, 3.0, 4.0]
