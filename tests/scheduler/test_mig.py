"""MIG profile tables and legal placements, per NVIDIA's MIG user guide."""

from __future__ import annotations

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Job, NodeSpec, Scheduler, SharingMode, mig
from gpuwarden.scheduler.mig import MigInstance


def test_a100_40gb_profiles_match_the_user_guide() -> None:
    got = {(p.name, p.profile_id, p.compute_slices, p.memory_slices, p.starts, p.max_count)
           for p in mig.MIG_PROFILES["A100-40GB"]}  # fmt: skip
    assert got == {
        ("1g.5gb", 19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
        ("1g.5gb+me", 20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
        ("1g.10gb", 15, 1, 2, (0, 2, 4, 6), 4),
        ("2g.10gb", 14, 2, 2, (0, 2, 4), 3),
        ("3g.20gb", 9, 3, 4, (0, 4), 2),
        ("4g.20gb", 5, 4, 4, (0,), 1),
        ("7g.40gb", 0, 7, 8, (0,), 1),
    }


@pytest.mark.parametrize(
    ("model", "names"),
    [
        (
            "A100-80GB",
            ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
        ),
        (
            "H100-80GB",
            ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
        ),
        ("H200", ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
    ],
)
def test_profile_names_per_model(model: str, names: list[str]) -> None:
    profiles = mig.MIG_PROFILES[model]
    assert [p.name for p in profiles] == names
    # same slice geometry on every 7/8-slice GPU
    assert [(p.compute_slices, p.memory_slices, p.starts) for p in profiles] == [
        (p.compute_slices, p.memory_slices, p.starts) for p in mig.MIG_PROFILES["A100-40GB"]
    ]


@pytest.mark.parametrize(
    ("name", "occupied", "starts"),
    [
        ("3g.40gb", 0, (0, 4)),
        ("3g.40gb", 0b00001111, (4,)),
        ("4g.40gb", 0b10000000, (0,)),
        ("4g.40gb", 0b00000001, ()),
        ("7g.80gb", 0b01000000, ()),
        ("1g.20gb", 0b00000100, (0, 4, 6)),
        ("2g.20gb", 0b00110000, (0, 2)),
        ("1g.10gb", 0b01111111, ()),  # slice 7 alone takes no 1g instance
    ],
)
def test_legal_starts(name: str, occupied: int, starts: tuple[int, ...]) -> None:
    assert mig.legal_starts("H100-80GB", name, occupied) == starts


@pytest.mark.parametrize(
    "layout",
    [
        [("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)],
        [("3g.20gb", 0), ("3g.20gb", 4)],
        [("1g.5gb", s) for s in range(7)],
        [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4), ("1g.5gb+me", 6)],
        [("1g.10gb", 0), ("1g.10gb", 2), ("1g.10gb", 4), ("1g.10gb", 6)],
        [("7g.40gb", 0)],
    ],
)
def test_legal_layouts(layout: list[tuple[str, int]]) -> None:
    mig.validate_layout("A100-40GB", [_inst("A100-40GB", n, s) for n, s in layout])


@pytest.mark.parametrize(
    ("layout", "problem"),
    [
        ([("3g.20gb", 2)], "cannot start"),
        ([("4g.20gb", 0), ("3g.20gb", 0)], "overlaps"),
        ([("1g.5gb+me", 0), ("1g.5gb+me", 1)], "at most 1"),
        ([("2g.10gb", 1)], "cannot start"),
        ([("7g.40gb", 0), ("1g.5gb", 6)], "overlaps"),
    ],
)
def test_illegal_layouts(layout: list[tuple[str, int]], problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        mig.validate_layout("A100-40GB", [_inst("A100-40GB", n, s) for n, s in layout])


def _inst(model: str, name: str, start: int) -> MigInstance:
    return MigInstance(name, start, mig.profile(model, name).memory_slices)


@pytest.mark.parametrize("model", list(mig.MIG_PROFILES))
def test_placement_table_only_gives_legal_free_starts(model: str) -> None:
    for p in mig.MIG_PROFILES[model]:
        table = mig.placement_table(model, p.name)
        for mask in range(256):
            legal = mig.legal_starts(model, p.name, mask)
            start = int(table[0, mask])
            assert (start == -1) == (not legal)
            if legal:
                assert start in legal and not p.slice_mask(start) & mask
    assert mig.capacity_table(model)[0] == 7


def test_unknown_profile_and_model_are_input_errors() -> None:
    with pytest.raises(InputError, match="has no MIG profile '1g.5gb'"):
        mig.profile("H100-80GB", "1g.5gb")
    with pytest.raises(InputError, match="does not support MIG"):
        mig.profile("T4", "1g.5gb")
    assert mig.canonical_model("NVIDIA A100-SXM4-80GB") == "A100-80GB"


def _mig_cluster(gpus: int = 2, model: str = "A100-80GB") -> Scheduler:
    node = NodeSpec.uniform("m1", 64000, 512 * 1024, gpus, model, mode=SharingMode.MIG)
    return Scheduler([node], "bestfit")


def test_scheduler_places_mig_instances_at_legal_starts_until_full() -> None:
    s = _mig_cluster(gpus=1)
    starts = []
    for i in range(7):
        d = s.place(Job(f"j{i}", mig_profile="1g.10gb"))
        assert d.placed, d.reason
        inst = d.placement.tasks[0].mig  # type: ignore[union-attr]
        assert inst is not None
        starts.append(inst.start)
    assert sorted(starts) == list(range(7))
    assert s.allocation_ratio() == pytest.approx(1.0)
    assert not s.place(Job("j7", mig_profile="1g.10gb")).placed


def test_3g_goes_where_a_4g_still_fits() -> None:
    s = _mig_cluster(gpus=1)
    first = s.place(Job("a", mig_profile="3g.40gb")).placement
    assert first is not None and first.tasks[0].mig == MigInstance("3g.40gb", 4, 4)
    assert s.place(Job("b", mig_profile="4g.40gb")).placed
    assert not s.place(Job("c", mig_profile="1g.10gb")).placed  # 4g + 3g use all 7 slices


def test_media_extension_instance_at_most_once_per_gpu() -> None:
    s = _mig_cluster(gpus=1)
    assert s.place(Job("a", mig_profile="1g.10gb+me")).placed
    d = s.place(Job("b", mig_profile="1g.10gb+me"))
    assert not d.placed and "GPU" in d.reason
    s.release("a")
    assert s.place(Job("b2", mig_profile="1g.10gb+me")).placed


def test_mig_gpus_take_no_whole_or_shared_tasks_and_vice_versa() -> None:
    s = _mig_cluster(gpus=1)
    assert not s.place(Job("whole", gpus_per_task=1)).placed
    assert not s.place(Job("share", gpu_milli=500)).placed
    plain = Scheduler([NodeSpec.uniform("p", 64000, 262144, 1, "A100-80GB")])
    assert not plain.place(Job("m", mig_profile="1g.10gb")).placed


def test_profile_of_another_model_finds_no_node() -> None:
    s = _mig_cluster(gpus=1, model="H200")
    d = s.place(Job("a", mig_profile="1g.10gb"))
    assert not d.placed
    assert s.place(Job("b", mig_profile="1g.18gb")).placed


def test_mig_on_a_gpu_without_mig_is_refused() -> None:
    with pytest.raises(InputError, match="does not support MIG"):
        NodeSpec.uniform("t", 8000, 32768, 1, "T4", mode=SharingMode.MIG)
