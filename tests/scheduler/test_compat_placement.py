"""Placement under NVIDIA's CUDA compatibility rules: a job whose CUDA a node's driver cannot
run never lands there, and waits with its reason; forward compatibility packages are honoured
on data-center GPUs and supported driver branches only."""

from __future__ import annotations

import pytest
from service_helpers import A  # this directory's helpers, imported by path

from gpuwarden.errors import InputError
from gpuwarden.scheduler import compat
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.resources import NodeSpec
from gpuwarden.scheduler.scheduler import Scheduler


def _node(name: str, driver: str | None, cuda: str | None, compat_pkg: str | None = None,
          model: str = "H100-80GB") -> NodeSpec:  # fmt: skip
    n = NodeSpec.uniform(name, 64000, 262144, 8, model)
    return NodeSpec(n.name, n.cpu_milli, n.memory_mib, n.gpu_model, n.gpus,
                    driver_version=driver, cuda_version=cuda, cuda_compat=compat_pkg)  # fmt: skip


def _runs(node: NodeSpec, **needs: object) -> str | None:
    return compat.why_not_runs(
        min_cuda=needs.get("min_cuda"), min_driver=needs.get("min_driver"),  # type: ignore[arg-type]
        gpu_arch=frozenset(needs.get("gpu_arch", ())), ptx_jit=bool(needs.get("ptx_jit")),  # type: ignore[call-overload]
        model=node.gpu_model, driver=node.driver_version, cuda=node.cuda_version,
        cuda_compat=node.cuda_compat,
    )  # fmt: skip


def test_the_rules_native_minor_version_and_forward_compatibility():
    r535 = _node("a", "535.161.08", "12.2")
    assert _runs(r535, min_cuda="12.2") is None  # native
    assert _runs(r535, min_cuda="12.6") is None  # minor version compatibility: 12.x on >= 525.60.13
    assert "PTX JIT" in _runs(r535, min_cuda="12.6", ptx_jit=True)  # type: ignore[operator]
    assert "runs CUDA 12.2, job needs 13.0" in _runs(r535, min_cuda="13.0")  # type: ignore[operator]
    # cuda-compat 13.0 on an R535 (long-term support) data-center node: forward compatible
    assert _runs(_node("b", "535.161.08", "12.2", "13.0"), min_cuda="13.0") is None
    # ... but not on a new-feature branch, nor on a GPU that is not a data-center one
    assert _runs(_node("c", "545.23.06", "12.3", "13.0"), min_cuda="13.0") is not None
    # nor on a branch past its end of life when NVIDIA's table was written (R470)
    assert _runs(_node("h", "470.239.06", "11.4", "12.2", model="V100M32"), min_cuda="12.2")
    assert _runs(_node("d", "535.161.08", "12.2", "13.0", model="RTX4090"), min_cuda="13.0")
    # an R520 driver (CUDA 11.8) cannot run CUDA 12 by minor version compatibility
    assert _runs(_node("e", "520.61.05", "11.8"), min_cuda="12.0") is not None
    assert _runs(_node("f", "470.239.06", "11.4"), min_cuda="11.8") is None
    # unknown versions never meet a stated need; a job stating none runs anywhere
    assert _runs(_node("g", None, None), min_cuda="11.0") == "its driver or CUDA version is unknown"
    assert _runs(_node("g", None, None)) is None
    # CUDA 13 dropped Volta
    assert "compute capability" in _runs(_node("v", "580.65.06", "13.0", model="V100M32"),  # type: ignore[operator]
                                         min_cuda="13.0")  # fmt: skip
    assert _runs(r535, gpu_arch=["ampere"]) == "architecture hopper of H100-80GB is not ampere"
    assert _runs(r535, min_driver="550") == "driver 535.161.08 < 550"


def test_table_3_drivers_satisfy_their_own_minor_version_minimum():
    for (major, minor), driver in compat.TOOLKIT_DRIVER.items():
        minimum = compat.parse_version(compat.MINOR_COMPAT_MIN_DRIVER[major])
        assert (
            minimum is not None
            and compat.parse_version(driver) >= minimum
            or major == 11
            and minor == 0
        )
        assert compat.needed_driver(f"{major}.{minor}") == driver


def test_a_job_with_too_new_a_cuda_waits_with_its_reason_and_forward_compat_places_it():
    old = _node("old", "535.161.08", "12.2")
    s = Scheduler([old])
    job = Job("j-cuda13", min_cuda="13.0", gpus_per_task=1)
    s.submit(job)
    (d,) = s.schedule(now=0)
    assert not d.placed
    assert d.reason == (
        "job j-cuda13: no node can run its CUDA/driver needs "
        "(e.g. old: driver 535.161.08 runs CUDA 12.2, job needs 13.0 "
        "(its toolkit ships with driver 580.65.06))"
    )
    assert s.pending == [job]  # it waits in the queue
    # the same cluster with cuda-compat 13.0 installed on a second node: placed there, only
    fwd = _node("fwd", "535.161.08", "12.2", "13.0")
    s2 = Scheduler([old, fwd])
    got = s2.place(job, now=0)
    assert got.placed and got.placement is not None and got.placement.tasks[0].node == "fwd"
    # twelve jobs of 8 GPUs' worth: minor-version jobs spread on both, CUDA 13 only on fwd
    for i in range(7):
        assert s2.place(Job(f"c13-{i}", min_cuda="13.0"), now=0).placement.tasks[0].node == "fwd"  # type: ignore[union-attr]
    assert not s2.place(Job("c13-more", min_cuda="13.0"), now=0).placed
    assert s2.place(Job("c12", min_cuda="12.4"), now=0).placement.tasks[0].node == "old"  # type: ignore[union-attr]


def test_bad_needs_are_refused_by_name():
    with pytest.raises(InputError, match="min_cuda must look like"):
        Job("x", min_cuda="twelve")
    with pytest.raises(InputError, match="unknown gpu_arch"):
        Job("x", gpu_arch=frozenset({"hoper"}))
    with pytest.raises(InputError, match="sharing must be one of"):
        Job("x", gpu_milli=500, sharing="mig")


def test_mps_and_time_sliced_shares_never_meet_on_a_gpu():
    s = Scheduler([NodeSpec.uniform("n", 64000, 262144, 1, "A100-80GB")])
    assert s.place(Job("m1", gpu_milli=300, sharing="mps"), now=0).placed
    refused = s.place(Job("t1", gpu_milli=300, sharing="time-slice"), now=0)
    assert not refused.placed and "GPUs running MPS shares excluded" in refused.reason
    anyone = s.place(Job("a1", gpu_milli=300), now=0)  # "any" joins the GPU's MPS shares
    assert anyone.placement is not None and anyone.placement.tasks[0].sharing == "mps"
    s.release("m1")
    s.release("a1")
    placed = s.place(Job("t2", gpu_milli=300, sharing="time-slice"), now=0)
    assert placed.placement is not None and placed.placement.tasks[0].sharing == "time-slice"


def test_the_service_keeps_a_job_waiting_until_an_agent_reports_a_new_enough_driver(svc):
    gpu = {"index": 0, "uuid": "GPU-0", "model": "H100-80GB", "memory_mib": 81920,
           "driver_version": "535.161.08", "cuda_version": "12.2"}  # fmt: skip
    svc.register("n1", {"cpu_milli": 8000, "memory_mib": 65536, "gpus": [gpu]})
    job, _ = svc.submit(A, {"name": "c", "command": ["true"], "min_cuda": "12.8", "ptx_jit": True,
                            "gpu_milli": 500, "sharing": "mps"})  # fmt: skip
    got = svc.job(A, job["job_id"])
    assert got["state"] == "queued" and "driver 535.161.08 runs CUDA 12.2" in got["reason"]
    assert "PTX JIT" in got["reason"] and got["min_cuda"] == "12.8"
    newer = {**gpu, "driver_version": "570.124.06", "cuda_version": "12.8"}
    svc.register("n1", {"cpu_milli": 8000, "memory_mib": 65536, "gpus": [newer]})
    got = svc.job(A, job["job_id"])
    assert got["state"] == "running" and got["placement"][0]["sharing"] == "mps"
    (order,) = svc.agent_sync("n1", {"tasks": [], "logs": []})["start"]
    assert order["sharing"] == "mps" and order["gpu_milli"] == 500


def test_the_agent_registers_the_driver_and_cuda_versions_nvml_reports(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collectors"))
    from fake_nvml import FakeNvml

    from gpuwarden.collectors.nvml import NvmlCollector
    from gpuwarden.scheduler.agent import find_cuda_compat, host_inventory

    nv = FakeNvml("h100_hgx_8gpu.json")  # driver 535.161.08, CUDA 12020
    inv = host_inventory("n1", fake_gpus=None, gpu_model="", cuda_compat="13.0",
                         collector=NvmlCollector(nvml=nv, hostname="n1"))  # fmt: skip
    assert {(g["driver_version"], g["cuda_version"], g["cuda_compat"]) for g in inv.gpus} == {
        ("535.161.08", "12.2", "13.0")
    }
    old = FakeNvml("v100_r470_2gpu.json")  # no CUDA version: left out, never ""
    inv = host_inventory("n2", fake_gpus=None, gpu_model="",
                         collector=NvmlCollector(nvml=old, hostname="n2"))  # fmt: skip
    assert all(g["driver_version"] == "470.239.06" and "cuda_version" not in g for g in inv.gpus)
    for version, lib in (("12.8", True), ("13.0", True), ("13.1", False)):
        compat_dir = tmp_path / f"cuda-{version}" / "compat"
        compat_dir.mkdir(parents=True)
        if lib:
            (compat_dir / "libcuda.so.580.65.06").write_bytes(b"")
    assert find_cuda_compat(tmp_path) == "13.0" and find_cuda_compat(tmp_path / "none") is None
