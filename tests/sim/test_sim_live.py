"""LiveFleet: the fleet one step at a time, as the ``sim://`` collector reads it."""

from __future__ import annotations

import pytest

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.sim import Fleet, FleetSpec, LiveFleet

SPEC = FleetSpec(nodes=2, gpus_per_node=4, seed=5, step_s=300, days=1, accel=2000)


def test_steps_are_the_fleets_samples():
    frame = next(Fleet(SPEC).chunks(chunk_s=3 * 3600, progress=False)).samples
    live = LiveFleet(SPEC, buffer_steps=7)  # a buffer that does not divide the chunk
    for _ in range(20):
        batch = live.step()
        rows = frame[frame["ts"] == batch.ts]
        assert sorted(s.gpu.uuid for s in batch.samples) == sorted(rows["uuid"].astype(str))
        for s in batch.samples:
            row = rows[rows["uuid"] == s.gpu.uuid].iloc[0]
            assert s.values == {k: row[k] for k in s.values}


def test_resume_and_injected_xid():
    later = SPEC.start_ts + 15 * 3600 + 10
    live = LiveFleet(SPEC, resume_ts=later)
    live.inject_xid("node001", 2, 79)
    batch = live.step()
    assert batch.ts == SPEC.start_ts + 15 * 3600 + 300
    hit = [e for e in batch.events if e.detail == "injected"]
    assert [(e.gpu.hostname, e.gpu.index, e.code) for e in hit] == [("node001", 2, 79)]
    assert hit[0].gpu in live.gpus


def test_bad_input_names_the_fleet():
    with pytest.raises(ConfigError, match="resume_ts"):
        LiveFleet(SPEC, resume_ts=SPEC.start_ts - 1)
    with pytest.raises(InputError, match="'node009' index 0 in the lab"):
        LiveFleet(SPEC, name="the lab").inject_xid("node009", 0, 79)
