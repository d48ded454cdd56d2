"""Whether a job's CUDA can run on a node: NVIDIA's CUDA compatibility rules, as tables.

A node reports its driver version and the CUDA version that driver supports natively
(``nvidia-smi``'s "CUDA Version", NVML's ``nvmlSystemGetCudaDriverVersion``), and the CUDA
version of a forward compatibility package if one is installed (``cuda-compat-12-8`` puts
``libcuda.so`` under ``/usr/local/cuda-12.8/compat``). A job may ask for a minimum driver, a
minimum CUDA version and GPU architectures. A job asking for CUDA ``M.m`` runs on a node when:

1. **Native**: the driver's own CUDA version is at least ``M.m``; or
2. **Minor version compatibility** (CUDA 11 onwards): the driver's CUDA major is ``M`` and the
   driver is at least the major's minimum, ``MINOR_COMPAT_MIN_DRIVER`` ("CUDA 11.x >= 450.80.02,
   CUDA 12.x >= 525.60.13, CUDA 13.x >= 580" on Linux). Not for a job that JIT-compiles PTX
   (``ptx_jit``): PTX built by a newer toolkit does not load on an older driver under minor
   version compatibility; or
3. **Forward compatibility**: the node has a ``cuda-compat`` package for ``M.m`` or later, its
   GPUs are data-center GPUs (``DATACENTER_MODELS``), and its driver is on a branch NVIDIA
   supports forward compatibility on (``FORWARD_COMPAT_BRANCHES``).

Sources (checked 2026-12 with the project's search tool):

- NVIDIA, "CUDA Compatibility", https://docs.nvidia.com/deploy/cuda-compatibility/ :
  "Minor Version Compatibility", Table 1 "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version
  Ranges"; "Forward Compatibility": "applicable only for systems with NVIDIA Data Center GPUs,
  select NGC Server Ready SKUs of RTX cards, Jetson boards", via ``cuda-compat-<major>-<minor>``.
- NVIDIA, "CUDA Toolkit Release Notes", Table 3 "CUDA Toolkit and Corresponding Driver
  Versions" (Linux x86_64, the driver each toolkit GA ships with): ``TOOLKIT_DRIVER``.
- NVIDIA Data Center Drivers, "Supported Drivers and CUDA Toolkit Versions"
  (https://docs.nvidia.com/datacenter/tesla/drivers/): the long-term-support and production
  branches and the newest CUDA major each runs without a forward compatibility package.
- CUDA 13.0 release notes: offline compilation and library support for Maxwell, Pascal and
  Volta (compute capability < 7.5) removed, so CUDA 13 jobs need Turing or newer.
"""

from __future__ import annotations

import math
from functools import cache

from gpuwarden.errors import InputError
from gpuwarden.scheduler import mig

Version = tuple[int, ...]

#: Table 3 of the CUDA Toolkit release notes: CUDA toolkit (GA) -> the Linux x86_64 driver it
#: ships with, which runs it natively with every feature.
TOOLKIT_DRIVER: dict[tuple[int, int], str] = {
    (11, 0): "450.51.05",
    (11, 1): "455.23",
    (11, 2): "460.27.03",
    (11, 3): "465.19.01",
    (11, 4): "470.42.01",
    (11, 5): "495.29.05",
    (11, 6): "510.39.01",
    (11, 7): "515.43.04",
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

#: "CUDA Compatibility", Minor Version Compatibility, Table 1: the least driver that runs any
#: CUDA ``major``.x application (with a limited feature set when older than the toolkit's own).
MINOR_COMPAT_MIN_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580"}

#: Driver branches (the driver's major number) that NVIDIA's data-center driver documentation
#: ("Supported Drivers and CUDA Toolkit Versions", Table 2, the r580 to r620 editions) lists as
#: long-term-support (R535, R580, R620) or production (R570, R595) branches, the ones forward
#: compatibility is supported on. New-feature branches (545, 555, 560, 575, 610, ...) and
#: branches the same table calls end of life (R470, R525, R550, ...) are not. R535 (June 2026)
#: and R570 (February 2026) have since reached their end of life too; placement keeps them, as
#: fleets still run them, and does not judge support dates.
FORWARD_COMPAT_BRANCHES: frozenset[int] = frozenset({535, 570, 580, 595, 620})

#: Our GPU models that are NVIDIA data-center GPUs (forward compatibility needs one).
DATACENTER_MODELS: frozenset[str] = frozenset(
    {"P100", "T4", "V100M16", "V100M32", "A10", "A30", "L4", "L40S", "A100-40GB", "A100-80GB",
     "H100-80GB", "H200"}
)  # fmt: skip

#: GPU model -> (architecture, compute capability); unknown models have neither.
ARCHITECTURE: dict[str, tuple[str, float]] = {
    "P100": ("pascal", 6.0),
    "V100M16": ("volta", 7.0),
    "V100M32": ("volta", 7.0),
    "T4": ("turing", 7.5),
    "A10": ("ampere", 8.6),
    "A30": ("ampere", 8.0),
    "A100-40GB": ("ampere", 8.0),
    "A100-80GB": ("ampere", 8.0),
    "L4": ("ada", 8.9),
    "L40S": ("ada", 8.9),
    "H100-80GB": ("hopper", 9.0),
    "H200": ("hopper", 9.0),
}

#: The least compute capability each CUDA major builds and runs for (CUDA 12: Maxwell 5.0;
#: CUDA 13 dropped Maxwell, Pascal and Volta).
MIN_COMPUTE_CAPABILITY: dict[int, float] = {11: 3.5, 12: 5.0, 13: 7.5}

ARCHITECTURES = frozenset(a for a, _ in ARCHITECTURE.values()) | {"maxwell", "blackwell"}


def parse_version(text: str | None, what: str = "version") -> Version | None:
    """ "525.60.13" -> (525, 60, 13); None for None or ""; ``InputError`` for anything else."""
    if text is None or text == "":
        return None
    parts = str(text).strip().split(".")
    if not all(p.isdigit() for p in parts) or len(parts) > 4:
        raise InputError(f"{what} must look like 12.4 or 550.54.14, got {text!r}")
    return tuple(int(p) for p in parts)


def _at_least(have: Version, need: Version) -> bool:
    n = max(len(have), len(need))
    return have + (0,) * (n - len(have)) >= need + (0,) * (n - len(need))


def architecture(model: str) -> str | None:
    got = ARCHITECTURE.get(mig.canonical_model(model))
    return got[0] if got else None


def why_not_runs(
    *,
    min_cuda: str | None,
    min_driver: str | None,
    gpu_arch: frozenset[str],
    ptx_jit: bool,
    model: str,
    driver: str | None,
    cuda: str | None,
    cuda_compat: str | None,
) -> str | None:
    """Why a job with these needs cannot run on a node with this driver, CUDA and forward
    compatibility package, or None when it can. Unknown versions never pass a stated need."""
    need_cuda, need_driver = parse_version(min_cuda, "min_cuda"), parse_version(min_driver)
    have_driver, have_cuda = _safe(driver), _safe(cuda)
    canon = mig.canonical_model(model)
    if gpu_arch:
        arch = architecture(canon)
        if arch not in gpu_arch:
            return f"architecture {arch or 'unknown'} of {canon or 'its GPUs'} is not " + "|".join(
                sorted(gpu_arch)
            )
    if need_driver is not None:
        if have_driver is None:
            return "its driver version is unknown"
        if not _at_least(have_driver, need_driver):
            return f"driver {driver} < {min_driver}"
    if need_cuda is None:
        return None
    cc = ARCHITECTURE.get(canon, ("", math.nan))[1]
    least_cc = MIN_COMPUTE_CAPABILITY.get(need_cuda[0])
    if least_cc is not None and not cc >= least_cc:  # NaN (unknown model) fails too
        return f"CUDA {min_cuda} needs compute capability >= {least_cc}, {canon} has {cc}"
    if have_driver is None or have_cuda is None:
        return "its driver or CUDA version is unknown"
    if _at_least(have_cuda, need_cuda):
        return None  # 1. native
    minor_min = MINOR_COMPAT_MIN_DRIVER.get(need_cuda[0])
    if (have_cuda[0] == need_cuda[0] and minor_min is not None and not ptx_jit
            and _at_least(have_driver, _v(minor_min))):  # fmt: skip
        return None  # 2. minor version compatibility
    compat = _safe(cuda_compat)
    if (compat is not None and _at_least(compat, need_cuda) and canon in DATACENTER_MODELS
            and have_driver[0] in FORWARD_COMPAT_BRANCHES):  # fmt: skip
        return None  # 3. forward compatibility
    why = f"driver {driver} runs CUDA {cuda}, job needs {min_cuda}"
    if (full := needed_driver(str(min_cuda))) is not None:
        why += f" (its toolkit ships with driver {full})"
    if ptx_jit and have_cuda[0] == need_cuda[0]:
        why += " (PTX JIT rules out minor version compatibility)"
    elif compat is not None:
        why += f" (cuda-compat {cuda_compat} does not apply here)"
    return why


def needed_driver(min_cuda: str) -> str | None:
    """The driver Table 3 pairs with CUDA ``min_cuda`` (for messages), if listed."""
    v = parse_version(min_cuda, "min_cuda")
    return TOOLKIT_DRIVER.get((v[0], v[1] if len(v) > 1 else 0)) if v else None


@cache
def _v(text: str) -> Version:
    got = parse_version(text)
    assert got is not None
    return got


def _safe(text: str | None) -> Version | None:
    """A node's reported version, None when absent or unreadable (never an error: a node's
    odd string must not stop placement of jobs that state no need)."""
    try:
        return parse_version(text)
    except InputError:
        return None


__all__ = [
    "ARCHITECTURE",
    "ARCHITECTURES",
    "DATACENTER_MODELS",
    "FORWARD_COMPAT_BRANCHES",
    "MINOR_COMPAT_MIN_DRIVER",
    "TOOLKIT_DRIVER",
    "architecture",
    "needed_driver",
    "parse_version",
    "why_not_runs",
]
