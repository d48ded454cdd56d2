"""MIG (Multi-Instance GPU) profiles and their legal placements.

A MIG-capable GPU has 7 compute slices and 8 memory slices. A GPU instance takes a run of
memory slices that must start at one of the positions the profile allows; two instances may not
share a memory slice. The tables below follow NVIDIA's MIG user guide ("Supported MIG
Profiles"); command line equivalent: ``nvidia-smi mig -lgip`` (profiles) and
``nvidia-smi mig -lgipp`` (placements, printed as ``{starts}:size`` in memory slices), e.g. on
an A100-SXM4-40GB::

    1g.5gb     ID 19  {0,1,2,3,4,5,6}:1      2g.10gb   ID 14  {0,2,4}:2
    1g.5gb+me  ID 20  {0,1,2,3,4,5,6}:1      3g.20gb   ID  9  {0,4}:4
    1g.10gb    ID 15  {0,2,4,6}:2            4g.20gb   ID  5  {0}:4
                                             7g.40gb   ID  0  {0}:8

The A100-80GB, H100-80GB and H200 (141 GB) have the same slice geometry with larger memory
per slice. ``+me`` profiles own the GPU's single set of media engines (NVDEC, NVJPG, OFA), so at
most one ``+me`` instance exists per GPU. Memory sizes are nominal (the number in the profile
name); ``nvidia-smi mig -lgip`` reports slightly less usable memory.

Because every profile's placements are given in memory slices and the compute slices of the
legal combinations always add up to at most 7, memory-slice occupancy (an 8-bit mask per GPU)
decides legality on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from gpuwarden.errors import InputError

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of one GPU model (``nvidia-smi mig -lgip`` row)."""

    name: str  # "1g.10gb"
    profile_id: int  # NVML GPU instance profile ID
    compute_slices: int
    memory_slices: int
    memory_gb: int  # nominal, from the name
    starts: tuple[int, ...]  # legal first memory slice
    max_count: int  # most instances of this profile one GPU can hold

    @property
    def memory_mib(self) -> int:
        return self.memory_gb * 1024

    @property
    def gpu_milli(self) -> int:
        """The instance's share of the GPU in thousandths, counted by compute slices."""
        return round(1000 * self.compute_slices / COMPUTE_SLICES)

    def slice_mask(self, start: int) -> int:
        """Memory slices ``[start, start + memory_slices)`` as a bit mask."""
        return ((1 << self.memory_slices) - 1) << start


#: NVML's GPU-instance profile constant (nvml.h ``NVML_GPU_INSTANCE_PROFILE_*``) per profile ID:
#: ``nvmlDeviceGetGpuInstanceProfileInfo`` takes the constant and answers with the ID, which the
#: placement and creation calls take (``scheduler/mig_agent.py``).
NVML_GI_PROFILE: dict[int, str] = {
    19: "NVML_GPU_INSTANCE_PROFILE_1_SLICE",
    20: "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1",  # +me
    15: "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2",  # 1 compute slice, 2 memory slices
    14: "NVML_GPU_INSTANCE_PROFILE_2_SLICE",
    9: "NVML_GPU_INSTANCE_PROFILE_3_SLICE",
    5: "NVML_GPU_INSTANCE_PROFILE_4_SLICE",
    0: "NVML_GPU_INSTANCE_PROFILE_7_SLICE",
}

#: The compute-instance profile that spans a whole GPU instance of that many compute slices
#: (``nvidia-smi mig -cci`` without a profile creates the same).
NVML_CI_PROFILE: dict[int, str] = {
    n: f"NVML_COMPUTE_INSTANCE_PROFILE_{n}_SLICE" for n in (1, 2, 3, 4, 7)
}


def _geometry(slice_gb: int, full_gb: int, suffix: str = "gb") -> tuple[MigProfile, ...]:
    """The seven profiles every 7/8-slice GPU offers, for a memory slice of ``slice_gb``."""
    one, two, four = slice_gb, 2 * slice_gb, 4 * slice_gb
    return (
        MigProfile(f"1g.{one}{suffix}", 19, 1, 1, one, (0, 1, 2, 3, 4, 5, 6), 7),
        MigProfile(f"1g.{one}{suffix}+me", 20, 1, 1, one, (0, 1, 2, 3, 4, 5, 6), 1),
        MigProfile(f"1g.{two}{suffix}", 15, 1, 2, two, (0, 2, 4, 6), 4),
        MigProfile(f"2g.{two}{suffix}", 14, 2, 2, two, (0, 2, 4), 3),
        MigProfile(f"3g.{four}{suffix}", 9, 3, 4, four, (0, 4), 2),
        MigProfile(f"4g.{four}{suffix}", 5, 4, 4, four, (0,), 1),
        MigProfile(f"7g.{full_gb}{suffix}", 0, 7, 8, full_gb, (0,), 1),
    )


def _h200() -> tuple[MigProfile, ...]:
    # The H200's 141 GB do not split evenly: NVIDIA names its slices 18/35/71 GB.
    return (
        MigProfile("1g.18gb", 19, 1, 1, 18, (0, 1, 2, 3, 4, 5, 6), 7),
        MigProfile("1g.18gb+me", 20, 1, 1, 18, (0, 1, 2, 3, 4, 5, 6), 1),
        MigProfile("1g.35gb", 15, 1, 2, 35, (0, 2, 4, 6), 4),
        MigProfile("2g.35gb", 14, 2, 2, 35, (0, 2, 4), 3),
        MigProfile("3g.71gb", 9, 3, 4, 71, (0, 4), 2),
        MigProfile("4g.71gb", 5, 4, 4, 71, (0,), 1),
        MigProfile("7g.141gb", 0, 7, 8, 141, (0,), 1),
    )


#: GPU model -> its MIG profiles, per NVIDIA's MIG user guide.
MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "A100-40GB": _geometry(5, 40),
    "A100-80GB": _geometry(10, 80),
    "H100-80GB": _geometry(10, 80),
    "H200": _h200(),
}

_ALIASES = {
    "A100": "A100-40GB",
    "A100-SXM4-40GB": "A100-40GB",
    "A100-PCIE-40GB": "A100-40GB",
    "A100-SXM4-80GB": "A100-80GB",
    "A100-PCIE-80GB": "A100-80GB",
    "A100 80GB PCIE": "A100-80GB",
    "H100": "H100-80GB",
    "H100 80GB HBM3": "H100-80GB",
    "H100-SXM5-80GB": "H100-80GB",
    "H100 PCIE": "H100-80GB",
    "H200 141GB": "H200",
    "H200-141GB": "H200",
}


def canonical_model(name: str) -> str:
    """Our name for a GPU model, accepting NVML's product names ("NVIDIA A100-SXM4-80GB")."""
    bare = name.strip().removeprefix("NVIDIA ").strip()
    upper = bare.upper()
    for alias, canon in _ALIASES.items():
        if upper == alias.upper():
            return canon
    return bare


def mig_capable(model: str) -> bool:
    return canonical_model(model) in MIG_PROFILES


def profile(model: str, name: str) -> MigProfile:
    """The profile ``name`` of ``model``; ``InputError`` names the choices when it has none."""
    canon = canonical_model(model)
    profiles = MIG_PROFILES.get(canon)
    if profiles is None:
        known = ", ".join(MIG_PROFILES)
        raise InputError(f"GPU model {model!r} does not support MIG (MIG models: {known})")
    for p in profiles:
        if p.name == name:
            return p
    names = ", ".join(p.name for p in profiles)
    raise InputError(f"{canon} has no MIG profile {name!r}; it has {names}")


def profile_names() -> frozenset[str]:
    """Every profile name of every MIG model."""
    return frozenset(p.name for ps in MIG_PROFILES.values() for p in ps)


@dataclass(frozen=True)
class MigInstance:
    """One GPU instance placed on a GPU: ``nvidia-smi mig -cgi PROFILE`` at a placement start."""

    profile: str
    start: int
    memory_slices: int

    @property
    def mask(self) -> int:
        return ((1 << self.memory_slices) - 1) << self.start


def legal_starts(model: str, name: str, occupied: int) -> tuple[int, ...]:
    """Starts where profile ``name`` fits on a GPU whose memory slices ``occupied`` are taken."""
    p = profile(model, name)
    return tuple(s for s in p.starts if not (p.slice_mask(s) & occupied))


def validate_layout(model: str, instances: list[MigInstance]) -> None:
    """Raise ``InputError`` unless ``instances`` is a legal layout of one ``model`` GPU."""
    occupied = 0
    counts: dict[str, int] = {}
    for inst in instances:
        p = profile(model, inst.profile)
        if inst.start not in p.starts:
            raise InputError(
                f"{inst.profile} cannot start at memory slice {inst.start} on {model} "
                f"(legal starts {list(p.starts)})"
            )
        if p.slice_mask(inst.start) & occupied:
            raise InputError(f"{inst.profile} at slice {inst.start} overlaps another instance")
        counts[p.name] = counts.get(p.name, 0) + 1
        if counts[p.name] > p.max_count:
            raise InputError(f"{model} holds at most {p.max_count} x {p.name}")
        occupied |= p.slice_mask(inst.start)


@cache
def placement_table(model: str, name: str) -> np.ndarray:
    """Where profile ``name`` goes on a GPU with occupancy ``mask``: ``table[0, mask]`` is the
    legal start that spoils the least of the GPU (then the lowest), -1 where none fits, and
    ``table[1, mask]`` the compute slices that start wastes (no longer placeable afterwards).

    Indexing with a whole array of occupancy masks answers for every GPU at once. ``max_count``
    limits (``+me``) are checked separately.
    """
    p = profile(model, name)
    cap = capacity_table(model)
    table = np.full((2, 1 << MEMORY_SLICES), -1, dtype=np.int64)
    for mask in range(1 << MEMORY_SLICES):
        best: tuple[int, int] | None = None
        for s in p.starts:
            if not (p.slice_mask(s) & mask):
                waste = int(cap[mask]) - p.compute_slices - int(cap[mask | p.slice_mask(s)])
                if best is None or (waste, s) < best:
                    best = (waste, s)
        if best is not None:
            table[0, mask], table[1, mask] = best[1], best[0]
    return table


@cache
def count_table(model: str, name: str) -> np.ndarray:
    """``table[mask]``: how many more instances of profile ``name`` fit on a GPU with occupancy
    ``mask``, its legal starts still free (at most ``max_count``).

    A profile's starts never overlap one another (NVIDIA's geometries: 1g at any of slices 0-6,
    2-slice profiles at 0, 2, 4, 6, 4-slice ones at 0 and 4), so placing one instance takes
    exactly one of them: the count is exact and drops by one per instance.
    """
    p = profile(model, name)
    masks = np.arange(1 << MEMORY_SLICES)
    free = sum(((masks & p.slice_mask(s)) == 0).astype(np.int64) for s in p.starts)
    return np.minimum(free, p.max_count)


@cache
def capacity_table(model: str) -> np.ndarray:
    """``table[mask]``: compute slices still placeable on a GPU with occupancy ``mask``.

    The most compute slices one more layout can add (greedy over profiles from large to small),
    used to pick the start that spoils the least of a GPU.
    """
    profiles = [
        p
        for p in sorted(MIG_PROFILES[canonical_model(model)], key=lambda p: -p.compute_slices)
        if not p.name.endswith("+me")
    ]
    memo: dict[int, int] = {}

    def best(mask: int) -> int:
        if mask not in memo:
            top = 0
            for p in profiles:
                for s in p.starts:
                    m = p.slice_mask(s)
                    if not (m & mask):
                        top = max(top, p.compute_slices + best(mask | m))
            memo[mask] = top
        return memo[mask]

    return np.array([best(mask) for mask in range(1 << MEMORY_SLICES)], dtype=np.int8)
