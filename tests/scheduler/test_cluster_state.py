"""ClusterState: feasibility, sharing modes, apply/undo, GPU memory."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import ClusterState, GpuSpec, Job, NodeSpec, SharingMode
from gpuwarden.scheduler.resources import GPU_MEMORY_MIB


def cluster() -> ClusterState:
    return ClusterState(
        [
            NodeSpec.uniform("a", 32000, 128 * 1024, 4, "A100-80GB"),
            NodeSpec.uniform("b", 8000, 16 * 1024, 2, "T4"),
            NodeSpec.uniform("cpu", 64000, 256 * 1024, 0),
        ]
    )


def test_feasible_honours_cpu_memory_model_and_gpu_count() -> None:
    c = cluster()
    assert c.feasible(Job("w", gpus_per_task=4)).tolist() == [True, False, False]
    assert c.feasible(Job("w", gpus_per_task=2)).tolist() == [True, True, False]
    assert c.feasible(Job("c", gpus_per_task=2, cpu_milli=9000)).tolist() == [True, False, False]
    assert c.feasible(Job("m", gpus_per_task=1, memory_mib=20000)).tolist() == [True, False, False]
    assert c.feasible(Job("t", gpus_per_task=1, gpu_models=frozenset({"T4"}))).tolist() == [
        False,
        True,
        False,
    ]
    assert c.feasible(Job("cpu-only", gpus_per_task=0, cpu_milli=40000)).tolist() == [
        False,
        False,
        True,
    ]


def test_share_goes_to_the_fullest_gpu_that_fits() -> None:
    c = cluster()
    c.apply(Job("x", gpu_milli=600), 0, (2,), None)
    gpus, _ = c.default_gpus(Job("y", gpu_milli=300), 0)
    assert gpus == (2,)
    gpus, _ = c.default_gpus(Job("z", gpu_milli=500), 0)
    assert gpus == (0,)  # 400 left on GPU 2 is too little


def test_apply_refuses_over_commit_and_undo_restores_everything() -> None:
    c = cluster()
    before = {k: getattr(c, k).copy() for k in ("free", "cpu_free", "mem_free", "gpu_mem_free")}
    a = c.apply(Job("x", gpu_milli=700, cpu_milli=1000, memory_mib=1024), 0, (1,), None)
    with pytest.raises(InputError, match="cannot take it"):
        c.apply(Job("y", gpu_milli=400), 0, (1,), None)
    with pytest.raises(InputError, match="needs 2 GPUs"):
        c.apply(Job("z", gpus_per_task=2), 0, (0,), None)
    assert c.allocated_milli == 700
    c.undo(a)
    for k, v in before.items():
        np.testing.assert_array_equal(getattr(c, k), v)
    assert c.allocated_milli == 0


def test_gpu_memory_charge_per_task() -> None:
    c = cluster()
    whole = c.memory_charge(Job("w", gpus_per_task=2))
    assert whole[0] == 2 * GPU_MEMORY_MIB["A100-80GB"] and whole[1] == 2 * 16 * 1024
    assert np.isnan(whole[2])  # no GPU: memory unknown, never zero
    share = c.memory_charge(Job("s", gpu_milli=250))
    assert share[0] == GPU_MEMORY_MIB["A100-80GB"] / 4
    declared = c.memory_charge(Job("d", gpu_milli=250, gpu_memory_mib=30000))
    assert declared[0] == 30000


def test_declared_gpu_memory_must_fit_on_the_gpu() -> None:
    c = cluster()
    assert c.feasible(Job("big", gpu_memory_mib=40000)).tolist() == [True, False, False]
    c.apply(Job("x", gpu_milli=500, gpu_memory_mib=60000), 0, (0,), None)
    # GPU 0 has 500 thousandths but only 20 GiB of memory left
    assert c.gpu_candidates(Job("y", gpu_milli=400, gpu_memory_mib=30000), 0).tolist() == [
        False,
        True,
        True,
        True,
    ]


def test_unknown_gpu_memory_cannot_satisfy_a_memory_request() -> None:
    c = ClusterState([NodeSpec.uniform("g2", 96000, 393216, 8, "G2")])
    assert np.isnan(c.gpu_mem_cap).all()
    assert not c.feasible(Job("m", gpu_memory_mib=1000)).any()
    assert c.feasible(Job("plain", gpus_per_task=1)).all()


def test_sharing_modes() -> None:
    node = NodeSpec(
        "n",
        16000,
        65536,
        "A100-40GB",
        (
            GpuSpec(0, mode=SharingMode.WHOLE),
            GpuSpec(1, mode=SharingMode.FRACTIONAL),
            GpuSpec(2, mode=SharingMode.MIG),
        ),
    )
    c = ClusterState([node])
    assert c.gpu_candidates(Job("w", gpus_per_task=1), 0).tolist() == [True, True, False]
    assert c.gpu_candidates(Job("s", gpu_milli=500), 0).tolist() == [False, True, False]
    assert c.gpu_candidates(Job("m", mig_profile="1g.5gb"), 0).tolist() == [False, False, True]
    a = c.apply(Job("s", gpu_milli=500), 0, (1,), None)
    with pytest.raises(InputError, match="in use"):
        c.set_mode(0, 1, SharingMode.WHOLE)
    c.undo(a)
    c.set_mode(0, 1, SharingMode.MIG)
    assert c.gpu_candidates(Job("m", mig_profile="7g.40gb"), 0).tolist() == [False, True, True]


def test_bad_cluster_input() -> None:
    with pytest.raises(InputError, match="no nodes"):
        ClusterState([])
    with pytest.raises(InputError, match="unique"):
        ClusterState([NodeSpec.uniform("a", 1, 1, 1, "T4"), NodeSpec.uniform("a", 1, 1, 1, "T4")])
    with pytest.raises(InputError, match="no gpu_model"):
        NodeSpec("x", 1000, 1024, "", (GpuSpec(0),))
