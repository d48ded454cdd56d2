"""``--shard i/n``: replicas reading one VictoriaMetrics score the fleet between them, whole
racks each, with the states one process gives and its risks within 0.02 (the model compares a
GPU with its node's and its rack's GPUs, so a rack split across replicas would change them; the
error rates and thermal rises are read against the whole fleet's, which each shard reads; its
model-rank features see the shard's GPUs only)."""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from tsdb_servers import start_victoriametrics

from gpuwarden.cli import main
from gpuwarden.demo import fleet_spec
from gpuwarden.models.artifact import load_model
from gpuwarden.models.score import backtest, score_store
from gpuwarden.sim import Fleet
from gpuwarden.store.shard import HostShard, parse_shard, shard_of
from gpuwarden.store.victoriametrics import VictoriaMetricsStore

pytestmark = pytest.mark.integration

END = math.floor(time.time() / 3600) * 3600 - 1800.0  # half an hour ago, mid-hour
# 12 nodes, 4 to a rack: 3 racks, which the hash puts in both shards of 2 (16 and 31 GPUs: each
# at least features.FLEET_MIN_GPUS, so each shard reads a fleet level of its own)
FLEET = {"nodes": 12, "gpus_per_node": 4, "models": "H100-80GB,A100-80GB", "days": 2.0,
         "step_s": 600, "seed": 5, "accel": 300.0}  # fmt: skip


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    daemon = start_victoriametrics(tmp_path_factory.mktemp("shard") / "vm")
    store = VictoriaMetricsStore(daemon.url)
    fleet = Fleet(fleet_spec(**FLEET, end_ts=END))
    for chunk in fleet.chunks(progress=False):
        store.write_frame(chunk.samples)
        store.write_events(chunk.events)
    store.write_failures(fleet.failures)
    store.compact(END)
    yield store
    store.close()
    daemon.stop()


def test_shards_score_whole_racks_as_one_process_does(vm) -> None:
    model = load_model(None)
    full = score_store(vm, model, at=END).set_index("uuid")
    parts = [score_store(HostShard(vm, i, 2), model, at=END).set_index("uuid") for i in (0, 1)]
    assert all(len(p) for p in parts), "3 racks should land in both shards"
    assert not set(parts[0].index) & set(parts[1].index)
    both = pd.concat(parts)
    assert sorted(both.index) == sorted(full.index) and len(full) >= 20
    racks = vm.gpus().set_index("uuid")["rack"]
    for i, part in enumerate(parts):
        assert (shard_of("rack:" + racks[part.index], 2) == i).all()
    assert not set(racks[parts[0].index]) & set(racks[parts[1].index])  # no rack split
    both = both.reindex(full.index)
    assert (both["state"] == full["state"]).all()
    # node and rack peers are whole in a shard, and the error rates and thermal rises are read
    # against the whole fleet's (``score.fleet_panel``); the model ranks (a GPU against its
    # model's GPUs) see the shard's GPUs only, and move a risk a little: 0.0015-0.0048 at 8
    # times of day. Read over the shard alone, the level moved one by 0.039 and the spread
    # rise one by 0.042 (the time of day sets the simulated load), 0.17 in shards of < 16 GPUs.
    assert np.allclose(both["risk"], full["risk"], atol=0.02, equal_nan=True)


def test_a_sharded_backtest_reads_the_fleets_level_at_every_hour(vm) -> None:
    model = load_model(None)
    hour = END + 1800.0 - 3 * 3600  # three whole hours before the data ends: one panel read
    kw = {"start": hour, "end": hour + 2 * 3600, "step_s": 3600.0}
    full = backtest(vm, model, **kw).set_index(["at", "uuid"])
    both = pd.concat([backtest(HostShard(vm, i, 2), model, **kw) for i in (0, 1)])
    both = both.set_index(["at", "uuid"]).reindex(full.index)
    assert full.index.get_level_values("at").nunique() == 3
    assert (both["state"] == full["state"]).all()
    assert np.allclose(both["risk"], full["risk"], atol=0.02, equal_nan=True)


def test_serve_replicas_score_their_share(vm, tmp_path) -> None:
    url = vm.url.replace("http://", "victoriametrics://")
    counts = []
    for shard in ("0/2", "1/2", None):
        # all three at END: at the clock, a run after an hour turns would see another window
        args = ["serve", "--once", "--at", str(END), "--no-collect", "--store", url, "--audit",
                str(tmp_path / f"audit-{len(counts)}.db"), "--verdicts",
                f"sqlite:///{tmp_path / f'verdicts-{len(counts)}.db'}"]  # fmt: skip
        r = CliRunner().invoke(main, args + (["--shard", shard] if shard else []))
        assert r.exit_code == 0, r.output
        counts.append(int(r.output.strip().splitlines()[-1].split()[0]))
    assert min(counts[:2]) > 0 and counts[0] + counts[1] == counts[2]


@pytest.mark.parametrize("text", ["2/2", "1", "a/b", "0/0", "-1/2"])
def test_a_bad_shard_is_one_clear_line(text, tmp_path) -> None:
    with pytest.raises(Exception, match="--shard"):
        parse_shard(text)
    r = CliRunner().invoke(
        main, ["score", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--shard", text]
    )
    assert r.exit_code != 0 and f"--shard {text!r}" in r.output, r.output
