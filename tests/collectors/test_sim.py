"""The live ``sim://`` collector: its URL parameters, one step per collect(), injected Xids."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.collectors import Collector, open_collector
from gpuwarden.collectors.sim import SimCollector, spec_from_url
from gpuwarden.errors import CollectorError, ConfigError, InputError
from gpuwarden.sim import Fleet, FleetSpec

START = 1767225600.0


# --- the URL -------------------------------------------------------------------------------
def test_url_sets_every_parameter():
    spec = spec_from_url(
        "sim://fleet?nodes=2&gpus=4&seed=9&accel=3&step=30&models=A100-80GB,H200"
        "&start=1700000000&rack=1&sudden=0.5&rate=0.001&lookalikes=0.2&kinds=gsp_error"
    )
    assert spec == FleetSpec(
        nodes=2,
        gpus_per_node=4,
        seed=9,
        accel=3.0,
        step_s=30,
        models=("A100-80GB", "H200"),
        start_ts=1.7e9,
        nodes_per_rack=1,
        sudden_fraction=0.5,
        failure_rate_per_gpu_day=0.001,
        lookalike_fraction=0.2,
        kinds=("gsp_error",),
    )


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("nodes=abc", "nodes"),
        ("models=H100-80GB,V100", "V100"),
        ("bogus=1", "bogus"),
        ("step=0", "step_s"),
        ("accel=fast", "accel"),
    ],
)
def test_bad_url_parameter_is_named(query, named):
    with pytest.raises(ConfigError, match=named):
        SimCollector.from_url(f"sim://?{query}")


# --- the live collector --------------------------------------------------------------------
URL = f"sim://?nodes=2&gpus=4&seed=5&step=60&start={START:.0f}"


def test_collector_steps_one_sample_per_gpu():
    c = open_collector(URL)
    assert isinstance(c, Collector) and isinstance(c, SimCollector) and c.url == URL
    a, b = c.collect(), c.collect()
    assert a.ts == START and b.ts == START + 60
    assert len(a.samples) == len(c.gpus) == 8
    s = a.samples[0]
    assert "retired_pages_sbe" not in s.values and "gpu_temp_c" in s.values
    assert not any(np.isnan(v) for v in s.values.values())
    c.close()
    with pytest.raises(CollectorError):
        c.collect()


def test_collector_matches_the_fleet():
    c = SimCollector.from_url(URL)
    batches = [c.collect() for _ in range(5)]
    frame = next(Fleet(spec_from_url(URL)).chunks(chunk_s=300, progress=False)).samples
    for batch in batches:
        for s in batch.samples:
            row = frame[(frame["ts"] == batch.ts) & (frame["uuid"] == s.gpu.uuid)].iloc[0]
            assert s.values == {k: row[k] for k in s.values}


def test_inject_xid_reaches_the_next_batch_only():
    c = SimCollector.from_url(URL)
    c.inject_xid("node001", 2, 79)
    first, second = c.collect(), c.collect()
    hit = [e for e in first.events if e.detail == "injected"]
    assert [(e.gpu.hostname, e.gpu.index, e.code, e.kind) for e in hit] == [
        ("node001", 2, 79, "xid")
    ]
    assert hit[0].gpu in c.gpus and hit[0].ts == first.ts
    assert not [e for e in second.events if e.detail == "injected"]
    with pytest.raises(InputError, match="node009"):
        c.inject_xid("node009", 0, 79)
    with pytest.raises(InputError, match="Xid"):
        c.inject_xid("node000", 0, -4)


def test_collector_can_join_the_fleet_later():
    spec = FleetSpec(nodes=2, gpus_per_node=4, seed=5, step_s=300, days=1, accel=2000)
    frame = Fleet(spec).run(progress=False).samples
    later = START + 15 * 3600 + 10
    c = SimCollector.from_url(
        f"sim://?nodes=2&gpus=4&seed=5&step=300&accel=2000&start={START:.0f}&resume={later}"
    )
    batch = c.collect()
    assert batch.ts == START + 15 * 3600 + 300
    rows = frame[frame["ts"] == batch.ts]
    assert sorted(s.gpu.uuid for s in batch.samples) == sorted(rows["uuid"].astype(str))
    with pytest.raises(ConfigError, match="resume"):
        SimCollector.from_url(f"sim://?start={START:.0f}&resume=yesterday")


def test_names_moved_to_gpuwarden_sim_still_import_with_a_warning():
    import warnings

    import gpuwarden.sim
    from gpuwarden.collectors import sim as adapter

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert adapter.Fleet is gpuwarden.sim.Fleet and adapter.MODELS == gpuwarden.sim.MODELS
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]
    assert adapter.FleetSpec is gpuwarden.sim.FleetSpec  # used by the adapter: no warning
