"""MIG instances made, adopted and destroyed through NVML's MIG API (the fake NVML), with NVML's
errors: not supported, no permission, in use, insufficient resources."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collectors"))
from fake_nvml import load_fixture  # noqa: E402  (tests/collectors, by path)
from fake_nvml_mig import MIG_TABLES, FakeMigNvml  # noqa: E402

from gpuwarden.errors import DeviceSetupError  # noqa: E402
from gpuwarden.scheduler import mig  # noqa: E402
from gpuwarden.scheduler.mig_agent import MigManager  # noqa: E402


def _h100(gpus: int = 2, **device: object) -> FakeMigNvml:
    fixture = load_fixture("h100_hgx_8gpu.json")
    fixture["devices"] = [{**d, **device} for d in fixture["devices"][:gpus]]
    return FakeMigNvml(fixture)


def test_the_scheduler_tables_agree_with_what_each_gpu_says():
    for product, rows in MIG_TABLES.items():
        model = mig.canonical_model(product)
        ours = {p.name: p for p in mig.MIG_PROFILES[model]}
        assert set(ours) == {r.name for r in rows}, product
        for r in rows:
            p = ours[r.name]
            assert (p.profile_id, p.compute_slices, p.memory_slices, p.starts, p.max_count) == (
                r.profile_id, r.compute_slices, r.memory_slices, r.starts, r.max_count
            ), (product, r.name)  # fmt: skip
            assert mig.NVML_GI_PROFILE[p.profile_id] == r.enum


def test_creates_turns_mig_on_and_hands_out_the_mig_uuid(tmp_path):
    nv = _h100()
    m = MigManager(nv, "NVIDIA H100 80GB HBM3", tmp_path / "mig.json")
    a = m.create("j1.1.0", 0, "3g.40gb", 4)
    b = m.create("j2.1.0", 0, "1g.10gb", 0)
    assert nv.mig_current[0] == nv.NVML_DEVICE_MIG_ENABLE  # it turned MIG mode on
    assert nv.gpu_instances(0) == [("1g.10gb", 0, 1), ("3g.40gb", 4, 1)]
    assert a.uuid.startswith("MIG-") and b.uuid.startswith("MIG-") and a.uuid != b.uuid
    assert m.create("j1.1.0", 0, "3g.40gb", 4) == a  # a resent order: the same instance
    m.destroy("j1.1.0")
    assert nv.gpu_instances(0) == [("1g.10gb", 0, 1)]
    assert "j1.1.0" not in MigManager(nv, "H100-80GB", tmp_path / "mig.json").devices


def test_refusals_name_the_nvml_error_and_leave_nothing_behind(tmp_path):
    v100 = FakeMigNvml("v100_r470_2gpu.json")
    with pytest.raises(DeviceSetupError, match="NVMLError_NotSupported"):
        MigManager(v100, "A100-80GB", tmp_path / "v.json").create("k", 0, "1g.10gb", 0)
    with pytest.raises(DeviceSetupError, match="does not support MIG"):
        MigManager(v100, "Tesla V100-SXM2-32GB", tmp_path / "v.json").create("k", 0, "1g.10gb", 0)

    nv = _h100()
    m = MigManager(nv, "H100-80GB", tmp_path / "mig.json")
    nv.busy_gpus.add(1)  # a process on a GPU still in whole-GPU mode
    with pytest.raises(DeviceSetupError, match="NVMLError_InUse.*drain"):
        m.create("k1", 1, "1g.10gb", 0)
    nv.root = False
    with pytest.raises(DeviceSetupError, match="NVMLError_NoPermission.*root"):
        m.create("k2", 0, "1g.10gb", 0)
    nv.root = True
    m.create("k3", 0, "4g.40gb", 0)
    with pytest.raises(DeviceSetupError, match="NVMLError_InsufficientResources.*taken"):
        m.create("k4", 0, "2g.20gb", 2)  # overlaps the 4g instance's slices 0-3
    with pytest.raises(DeviceSetupError, match="cannot start at memory slice 1"):
        m.create("k5", 0, "2g.20gb", 1)  # not a legal placement of a 2-slice profile
    assert nv.gpu_instances(0) == [("4g.40gb", 0, 1)] and set(m.devices) == {"k3"}


def test_a_pending_mode_asks_for_a_reset(tmp_path):
    nv = _h100(mig_needs_reset=True)
    with pytest.raises(DeviceSetupError, match="pending until the GPU is reset"):
        MigManager(nv, "H100-80GB", tmp_path / "m.json").create("k", 0, "1g.10gb", 0)


def test_in_use_instances_stay_until_their_processes_end(tmp_path):
    nv = _h100()
    m = MigManager(nv, "H100-80GB", tmp_path / "mig.json")
    d = m.create("k", 0, "2g.20gb", 2)
    nv.busy_instances.add((0, d.gi_id))
    with pytest.raises(DeviceSetupError, match="NVMLError_InUse"):
        m.destroy("k")
    assert "k" in m.devices and nv.gpu_instances(0) == [("2g.20gb", 2, 1)]
    nv.busy_instances.clear()
    m.destroy("k")
    assert nv.gpu_instances(0) == [] and m.devices == {}


def test_a_restarted_agent_adopts_running_tasks_and_destroys_orphans(tmp_path):
    nv = _h100(mig_enabled=True)
    first = MigManager(nv, "H100-80GB", tmp_path / "mig.json")
    kept = first.create("running", 0, "3g.40gb", 0)
    first.create("ended", 0, "1g.10gb", 6)
    first.create("other-gpu", 1, "7g.80gb", 0)
    # an instance nobody recorded (made by hand, or a crash before the record was written)
    h = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 14, nv.c_nvmlGpuInstancePlacement_t(4, 2))

    again = MigManager(nv, "H100-80GB", tmp_path / "mig.json")  # the agent restarted
    got = again.reconcile({"running", "other-gpu", "vanished"}, range(2))
    assert sorted(got.adopted) == ["other-gpu", "running"] and got.lost == ()
    assert len(got.destroyed) == 2
    assert nv.gpu_instances(0) == [("3g.40gb", 0, 1)]
    assert nv.gpu_instances(1) == [("7g.80gb", 0, 1)]
    assert again.devices["running"] == kept and set(again.devices) == {"running", "other-gpu"}


def test_the_fake_mig_calls_have_pynvml_signatures():
    import inspect

    import pynvml

    fake = _h100()
    names = [n for n in vars(FakeMigNvml) if n.startswith("nvml")]
    assert len(names) >= 15
    for name in names:
        ours = list(inspect.signature(getattr(fake, name)).parameters)
        theirs = list(inspect.signature(getattr(pynvml, name)).parameters)
        assert ours == theirs, name
