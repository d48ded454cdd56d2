"""The openb trace: loading, the paper's arrival sequence, and a short replay on all 1,213
nodes. Reads the default trace vendored in tests/data/openb (the `openb_files` fixture)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Arrival, Scheduler, TaskMix, openb, replay


def test_nodes_and_pods_load(openb_files: tuple[Path, Path]) -> None:
    nodes = openb.load_nodes(openb_files[0])
    assert len(nodes) == 1213 and sum(len(n.gpus) for n in nodes) == 6212
    assert {n.gpu_model for n in nodes} == {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}
    pods = openb.load_pods(openb_files[1])
    assert len(pods) == 8152
    kinds = {k: sum(p.job.kind == k for p in pods) for k in ("cpu", "whole", "fractional")}
    assert kinds == {"cpu": 1088, "whole": 3986, "fractional": 3078}
    assert pods[1].job.gpu_milli == 460 and pods[1].created_s == 427061


def test_workload_follows_the_paper_protocol(openb_files: tuple[Path, Path]) -> None:
    jobs = [p.job for p in openb.load_pods(openb_files[1])]
    cap = 6212 * 1000
    wl = openb.workload(jobs, cap, 1.3, seed=42)
    total = sum(j.total_gpu_milli for j in wl)
    assert total <= 1.3 * cap and total > 1.3 * cap - 8000
    assert len({j.job_id for j in wl}) == len(wl)  # drawn copies get their own ids
    assert {j.job_id for j in wl[:8152]} == {j.job_id for j in jobs}  # every pod, shuffled
    assert [j.job_id for j in openb.workload(jobs, cap, 1.3, seed=42)] == [j.job_id for j in wl]
    assert [j.job_id for j in openb.workload(jobs, cap, 1.3, seed=43)] != [j.job_id for j in wl]
    # a file asking for more than the target loses random pods instead
    assert sum(j.total_gpu_milli for j in openb.workload(jobs, cap, 0.5, seed=1)) <= 0.5 * cap


@pytest.mark.parametrize("policy", ["warden", "fgd"])
def test_short_replay_on_the_full_cluster(openb_files: tuple[Path, Path], policy: str) -> None:
    nodes = openb.load_nodes(openb_files[0])
    jobs = [p.job for p in openb.load_pods(openb_files[1])]
    wl = openb.workload(jobs, 6212 * 1000, 1.3, seed=42)[:1500]
    s = Scheduler(nodes, policy, mix=TaskMix.from_jobs(jobs), seed=42)
    r = replay(s, [Arrival(0.0, j) for j in wl])
    assert r.placed.all()  # a fifth of the cluster: everything fits
    assert np.all(np.diff(r.allocated_milli) >= 0)  # nothing leaves
    assert r.allocated_milli[-1] == r.arrived_milli[-1] == s.cluster.allocated_milli
    assert (s.cluster.free >= 0).all() and (s.cluster.cpu_free >= 0).all()


def test_malformed_files_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.csv"
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\nn2,lots,1,1,T4\n")
    with pytest.raises(InputError, match=r"nodes.csv:3: cpu_milli must be a number"):
        openb.load_nodes(bad)
    bad.write_text("sn,cpu_milli,gpu\nn1,1,1\n")
    with pytest.raises(InputError, match="missing column"):
        openb.load_nodes(bad)
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,1,1500\n")
    with pytest.raises(InputError, match="pods.csv:2: job p: gpu_milli must be in 1..1000"):
        openb.load_pods(pods)
    with pytest.raises(InputError, match="cannot read"):
        openb.load_pods(tmp_path / "absent.csv")
