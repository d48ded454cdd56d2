"""Records read from a Prometheus-compatible store come in one order whatever order the
answers arrived in: by time, host and GPU, then, for events of one GPU at one time, by the
event itself."""

from __future__ import annotations

import itertools

from gpuwarden.store._prom_records import events_frame
from gpuwarden.telemetry import GpuId

A = GpuId("node1", 0, "GPU-a", "00000000:17:00.0", "H100", "r1")
B = GpuId("node0", 1, "GPU-b", "00000000:18:00.0", "H100", "r1")
ROWS = [
    (100.0, A, "xid", 79, ""),
    (100.0, A, "gpu_requires_reset", None, "reset"),
    (100.0, A, "xid", 48, ""),
    (100.0, B, "xid", 13, ""),
    (50.0, A, "xid", 31, ""),
]


def test_events_of_one_gpu_at_one_time_come_in_one_order() -> None:
    frames = [events_frame(list(p), uuids=None, kinds=None) for p in itertools.permutations(ROWS)]
    first = frames[0]
    assert all(f.equals(first) for f in frames[1:])
    got = first[["ts", "hostname", "kind", "code"]].astype(object)
    assert got.where(got.notna(), None).values.tolist() == [
        [50.0, "node1", "xid", 31],
        [100.0, "node0", "xid", 13],
        [100.0, "node1", "gpu_requires_reset", None],
        [100.0, "node1", "xid", 48],
        [100.0, "node1", "xid", 79],
    ]
