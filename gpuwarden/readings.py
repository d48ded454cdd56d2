"""What gpuwarden treats as missing: the one place a reading is judged possible or not.

Three kinds of reading are impossible, and each becomes missing (absent from ``Sample.values``,
NaN in a frame; never 0), counted as a ``telemetry.Rejection`` with its reason:

``sentinel``
    A DCGM blank value. DCGM fills a field it could not read with a sentinel of the field's type
    (``Field.dcgm_type``), and ``DCGM_*_IS_BLANK(v)`` is ``v >= *_BLANK``, so every value from
    ``*_BLANK`` up is blank: BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED and the rest.
    The families apply by type: 2147483632 is blank for an int32 field and an ordinary energy
    reading for the int64 ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``. An int64 sentinel parsed as
    float64 is 2**63 (``9223372036854775794`` reads as 9223372036854775808.0), or a little
    below it when an export rounded its digits, so int64 blanks start a part in 10**9 below 2**63.
``no_sensor``
    A field the board's hardware lacks: the memory (HBM) temperature of a GDDR board, which
    dcgm-exporter reports as 0 (a Tesla T4 at 74 C reads ``DCGM_FI_DEV_MEMORY_TEMP 0``).
``out_of_range``
    Outside the field's ``Bounds`` in the catalogue: a temperature of 255 C, a utilisation of
    120 %, power above twice the board's TDP, a negative counter, a PCIe width of 3; and
    infinity, which no sensor or counter reads (a field with no upper bound still has no
    infinite reading).
``not_a_number``
    A cell of a file that is no number at all (``hot``, ``NA``, a list in a Parquet column).
    Only ingest meets these: a collector's readings are numbers by the time they are judged.

NaN readings are missing without being counted (nothing was read). Every collector screens its
batch (``screen``), ingest screens its columns (``check_columns``), and the exporter screens what
it re-exports, so no sentinel reaches a store, a frame or ``/metrics``.

Which GPU and when a reading belongs to is judged here too, for ingest and for the collectors
that read a GPU index or a time from text (``gpu_index``, ``bad_gpu_indices``, ``bad_times``):
a record whose GPU index or time is impossible is not stored at all.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from gpuwarden.telemetry import (
    FIELDS,
    FIELDS_BY_NAME,
    REJECT_REASONS,
    Batch,
    DcgmType,
    Field,
    GpuId,
    Rejection,
    Sample,
)

# DCGM's blank values, from dcgm_structs.h (NVIDIA/DCGM, dcgmlib/dcgm_structs.h lines 49-150 at
# d646460, DCGM 4.5.3; unchanged at 72fa3fe, DCGM 4.6.0). NOT_FOUND, NOT_SUPPORTED and
# NOT_PERMISSIONED are BLANK + 1, + 2, + 3; DCGM_*_IS_BLANK(v) is v >= BLANK. NVIDIA/go-dcgm
# (pkg/dcgm/const.go), which dcgm-exporter uses, has the same numbers as DCGM_FT_*_BLANK.
DCGM_INT32_BLANK = 0x7FFFFFF0  # 2147483632
DCGM_INT32_NOT_FOUND = DCGM_INT32_BLANK + 1
DCGM_INT32_NOT_SUPPORTED = DCGM_INT32_BLANK + 2
DCGM_INT32_NOT_PERMISSIONED = DCGM_INT32_BLANK + 3
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # 9223372036854775792
DCGM_INT64_NOT_FOUND = DCGM_INT64_BLANK + 1
DCGM_INT64_NOT_SUPPORTED = DCGM_INT64_BLANK + 2
DCGM_INT64_NOT_PERMISSIONED = DCGM_INT64_BLANK + 3
DCGM_FP64_BLANK = 140737488355328.0  # 2**47
DCGM_FP64_NOT_FOUND = DCGM_FP64_BLANK + 1.0
DCGM_FP64_NOT_SUPPORTED = DCGM_FP64_BLANK + 2.0
DCGM_FP64_NOT_PERMISSIONED = DCGM_FP64_BLANK + 3.0

#: Every named sentinel, by family and name.
SENTINELS: Mapping[DcgmType, Mapping[str, float]] = {
    "int32": {
        "BLANK": DCGM_INT32_BLANK,
        "NOT_FOUND": DCGM_INT32_NOT_FOUND,
        "NOT_SUPPORTED": DCGM_INT32_NOT_SUPPORTED,
        "NOT_PERMISSIONED": DCGM_INT32_NOT_PERMISSIONED,
    },
    "int64": {
        "BLANK": DCGM_INT64_BLANK,
        "NOT_FOUND": DCGM_INT64_NOT_FOUND,
        "NOT_SUPPORTED": DCGM_INT64_NOT_SUPPORTED,
        "NOT_PERMISSIONED": DCGM_INT64_NOT_PERMISSIONED,
    },
    "fp64": {
        "BLANK": DCGM_FP64_BLANK,
        "NOT_FOUND": DCGM_FP64_NOT_FOUND,
        "NOT_SUPPORTED": DCGM_FP64_NOT_SUPPORTED,
        "NOT_PERMISSIONED": DCGM_FP64_NOT_PERMISSIONED,
    },
}

#: The float at and above which a reading of each type is blank. int32 and fp64 are exact in
#: float64; an int64 sentinel is not (float(DCGM_INT64_BLANK) == 2**63), and an export may have
#: rounded it to fewer digits, so anything within a part in 10**9 of 2**63 counts.
BLANK_FROM: Mapping[DcgmType, float] = {
    "int32": float(DCGM_INT32_BLANK),
    "int64": 2.0**63 * (1 - 1e-9),
    "fp64": DCGM_FP64_BLANK,
}


#: Why a cell of a file was not stored: it is no number (``REJECT_REASONS``' last entry).
NOT_A_NUMBER = REJECT_REASONS[3]


def is_blank(value: float, dcgm_type: DcgmType) -> bool:
    """A DCGM blank sentinel of ``dcgm_type``'s family (``DCGM_*_IS_BLANK``)."""
    return math.isfinite(value) and value >= BLANK_FROM[dcgm_type]


# -- boards ------------------------------------------------------------------------------------

#: Boards with GDDR memory, which has no temperature sensor (``mem_temp_c`` reads 0 or nothing),
#: by ``model_key``. RTX is every RTX-branded card (RTX A6000, RTX 6000 Ada, GeForce RTX...);
#: GRID is a vGPU profile (GRID A100-10C): the guest sees no memory temperature.
NO_MEMORY_SENSOR: frozenset[str] = frozenset(
    "T4 L4 L2 L20 L40 L40S L40G A2 A10 A10G A10M A16 A40 P4 P6 P40 M4 M6 M10 M40 M60 "
    "K10 K20 K20X K40 K80 RTX GRID".split()
)
#: Quadro and GeForce boards are GDDR too, except these HBM2 ones.
_HBM_WORKSTATION = frozenset({"GV100", "GP100"})
#: Board power (TDP, W) by ``model_key``: the highest of the model's variants, since power's
#: plausible range is 0 .. 2 x TDP.
TDP_W: Mapping[str, float] = {
    "T4": 70, "L4": 72, "A2": 60, "A10": 150, "A10G": 300, "A16": 250, "A30": 165,
    "A40": 300, "L20": 275, "L40": 300, "L40S": 350, "P4": 75, "P40": 250, "P100": 300,
    "V100": 350, "A100": 500, "A800": 500, "H20": 500, "H100": 700, "H800": 700, "H200": 700,
    "GH200": 1000, "B100": 700, "B200": 1000, "GB200": 1200, "B300": 1400, "GB300": 1400,
}  # fmt: skip
#: For a board not in ``TDP_W``: generous, so an unknown model is never cut short.
DEFAULT_TDP_W = 1500.0

_BRANDS = frozenset({"NVIDIA", "TESLA", "QUADRO", "GEFORCE"})
_WORDS = re.compile(r"[\s_-]+")


def model_key(name: str) -> str:
    """The board in a model name as collectors see it: ``"Tesla T4"``, ``"NVIDIA L4"``,
    ``"NVIDIA A100-SXM4-80GB"`` -> ``T4``, ``L4``, ``A100``; brands dropped, upper case."""
    words = [w for w in _WORDS.split(name.upper()) if w and w not in _BRANDS]
    return words[0] if words else ""


@lru_cache(maxsize=1024)
def has_memory_sensor(model: str) -> bool:
    """False for a GDDR board (no memory temperature); True for HBM boards and unknown ones."""
    key = model_key(model)
    if key in NO_MEMORY_SENSOR:
        return False
    branded = {"QUADRO", "GEFORCE"} & set(_WORDS.split(model.upper()))
    return not branded or key in _HBM_WORKSTATION


def tdp_w(model: str) -> float:
    """The board's TDP in W (``TDP_W``), ``DEFAULT_TDP_W`` when the model is not known."""
    return float(TDP_W.get(model_key(model), DEFAULT_TDP_W))


# -- judging readings --------------------------------------------------------------------------

_Rule = tuple[float, float, frozenset[float] | None]  # lo, hi (below the blanks), allowed


def _high(f: Field, model: str) -> float:
    b = f.bounds
    return b.hi if b.per_tdp is None else b.per_tdp * tdp_w(model)


@lru_cache(maxsize=1024)
def _rules(model: str) -> Mapping[str, _Rule]:
    """Per field, the test a good reading passes on this board: lo <= v <= hi, v in allowed."""
    hbm = has_memory_sensor(model)
    out: dict[str, _Rule] = {}
    for f in FIELDS:
        hi = min(_high(f, model), math.nextafter(BLANK_FROM[f.dcgm_type], -math.inf))
        lo = f.bounds.lo
        if f.sensor == "hbm" and not hbm:
            lo, hi = math.inf, -math.inf  # no reading passes
        out[f.name] = (lo, hi, f.bounds.allowed or None)
    return out


def plausible(f: Field) -> str:
    """The field's possible readings in words, as ``gpuwarden fields`` shows them:
    ``-10..130``, ``>= 0``, ``0..2xTDP``, ``1|2|4|8|16|32``; ``, HBM only`` for a sensor."""
    b = f.bounds
    if b.allowed:
        said = "|".join(f"{v:g}" for v in sorted(b.allowed))
    elif b.per_tdp is not None:
        said = f"{b.lo:g}..{b.per_tdp:g}xTDP"
    elif math.isinf(b.hi):
        said = f">= {b.lo:g}"
    else:
        said = f"{b.lo:g}..{b.hi:g}"
    return said + (", HBM only" if f.sensor == "hbm" else "")


def reason(f: Field, value: float, model: str = "") -> str | None:
    """Why ``value`` is not a possible reading of ``f`` on ``model``: ``sentinel``,
    ``no_sensor`` or ``out_of_range``; None when it is possible, or NaN (missing, not read)."""
    if math.isnan(value):
        return None
    if is_blank(value, f.dcgm_type):
        return "sentinel"
    if f.sensor == "hbm" and not has_memory_sensor(model):
        return "no_sensor"
    b = f.bounds
    inside = b.lo <= value <= _high(f, model) and not math.isinf(value)
    if not inside or (b.allowed and value not in b.allowed):
        return "out_of_range"
    return None


def check(
    ts: float, gpu: GpuId, values: Mapping[str, float]
) -> tuple[Mapping[str, float], list[Rejection]]:
    """``values`` without its impossible readings, and a ``Rejection`` for each one. When all
    are possible, ``values`` itself comes back. Names outside the catalogue are kept as read."""
    rules = _rules(gpu.model)
    bad = [
        name
        for name, v in values.items()
        if (r := rules.get(name)) is not None
        and not (r[0] <= v <= r[1] and (r[2] is None or v in r[2]))
    ]
    if not bad:
        return values, []
    rejected = []
    for name in bad:
        why = reason(FIELDS_BY_NAME[name], values[name], gpu.model)
        if why is not None:
            rejected.append(Rejection(ts, gpu, name, why, float(values[name])))
    dropped = set(bad)
    return {n: v for n, v in values.items() if n not in dropped}, rejected


def screen(batch: Batch) -> Batch:
    """The batch with every impossible reading left out of its samples and added to
    ``rejected``; a sample keeps its other fields. A batch already screened comes back as is."""
    if batch.screened:
        return batch
    samples: list[Sample] = []
    rejected = list(batch.rejected)
    for s in batch.samples:
        values, bad = check(s.ts, s.gpu, s.values)
        samples.append(s if values is s.values else dataclasses.replace(s, values=values))
        rejected.extend(bad)
    return dataclasses.replace(
        batch, samples=tuple(samples), rejected=tuple(rejected), screened=True
    )


def check_columns(
    values: Mapping[str, np.ndarray],
    models: np.ndarray | None,
    *,
    coded: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Judge a frame's field columns (float64, one row per sample; ``models`` the board of each
    row). Returns, for each column with an impossible reading, an int8 array: 0 possible (or
    NaN), else 1 + the index of the reason in ``telemetry.REJECT_REASONS``. Nothing is changed.
    ``coded``: the boards already as (names, index of each row's), for callers that have them
    (finding them in millions of rows costs more than the checks; ``models`` is then unused)."""
    if coded is None:
        if models is None:
            raise ValueError("check_columns needs the boards: models or coded")
        names, row_model = np.unique(np.asarray(models, dtype=str), return_inverse=True)
    else:
        names, row_model = coded
    out: dict[str, np.ndarray] = {}
    for name, col in values.items():
        f = FIELDS_BY_NAME[name]
        if _all_possible(f, col, names):
            continue
        read = ~np.isnan(col)
        code = np.zeros(len(col), dtype=np.int8)
        code[read & np.isfinite(col) & (col >= BLANK_FROM[f.dcgm_type])] = 1
        if f.sensor == "hbm":
            lacking = np.array([not has_memory_sensor(m) for m in names], dtype=bool)
            code[(code == 0) & read & lacking[row_model]] = 2
        b = f.bounds
        hi = np.array([_high(f, m) for m in names])[row_model] if b.per_tdp else b.hi
        outside = (col < b.lo) | (col > hi) | np.isinf(col)
        if b.allowed:
            outside |= ~np.isin(col, list(b.allowed))
        code[(code == 0) & read & outside] = 3
        if code.any():
            out[name] = code
    return out


def _all_possible(f: Field, col: np.ndarray, names: np.ndarray) -> bool:
    """True when no reading of ``col`` can be impossible for any board of ``names``, seen
    from its smallest and largest reading alone (two passes, no temporaries): the common case
    that ``check_columns`` then skips; False means look closer."""
    b = f.bounds
    if not len(col):
        return True
    if b.allowed:  # a set of values: judged cell by cell
        return False
    if f.sensor == "hbm" and not all(has_memory_sensor(m) for m in names):
        return False
    low, high = np.fmin.reduce(col), np.fmax.reduce(col)  # NaN only if every cell is
    if np.isnan(low):
        return True
    hi = min(_high(f, m) for m in names) if b.per_tdp and len(names) else b.hi
    return bool(low >= b.lo and high <= hi and high < BLANK_FROM[f.dcgm_type])


# -- which GPU, when ---------------------------------------------------------------------------

#: NVML numbers a GPU with an unsigned int (``nvmlDeviceGetIndex``), so an index is
#: 0 .. 2**32 - 1; 2**32 and above (or 1e30) is no GPU. Xid numbers are bounded the same way.
MAX_GPU_INDEX = 2**32 - 1
#: The times a record can carry, Unix seconds: from 2000-01-01 (before any GPU that NVML or DCGM
#: can read) up to 2100-01-01 UTC. A time of -5 or 0 is no time; 1.7e12 is milliseconds.
TS_RANGE: tuple[float, float] = (946_684_800.0, 4_102_444_800.0)


def gpu_index(text: str) -> int | None:
    """A GPU index written as decimal digits (``"3"``), None for anything else: a sign, a
    fraction, an exponent, or a number above ``MAX_GPU_INDEX``."""
    text = text.strip()
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value <= MAX_GPU_INDEX else None


def bad_gpu_indices(values: np.ndarray, most: int = MAX_GPU_INDEX) -> np.ndarray:
    """Which of ``values`` (float64; NaN is missing, judged elsewhere) are no index: negative,
    fractional, infinite or above ``most``."""
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        inside = (values >= 0) & (values <= most) & (values == np.floor(values))
    return ~np.isnan(values) & ~(finite & inside)


def is_time(ts: float) -> bool:
    """``ts`` (Unix seconds) lies within ``TS_RANGE``."""
    return TS_RANGE[0] <= ts < TS_RANGE[1]


def bad_times(ts: np.ndarray) -> np.ndarray:
    """Which of ``ts`` (Unix seconds, float64; NaN is missing) lie outside ``TS_RANGE``."""
    with np.errstate(invalid="ignore"):
        return ~np.isnan(ts) & ~((ts >= TS_RANGE[0]) & (ts < TS_RANGE[1]))


def time_problem(ts: float) -> str:
    """Why ``ts`` (one of ``bad_times``) is no time, in words for a report line; a time in
    TS_RANGE once divided by 10^3, 10^6 or 10^9 is said to be in that unit (InfluxDB exports
    nanoseconds, Prometheus' API milliseconds)."""
    if math.isinf(ts):
        return "is no time"
    for unit, scale in (("milliseconds", 1e3), ("microseconds", 1e6), ("nanoseconds", 1e9)):
        if TS_RANGE[0] * scale <= ts < TS_RANGE[1] * scale:
            return f"looks like {unit}; expected Unix seconds"
    return "is outside 2000-01-01..2100-01-01"


__all__ = [
    "BLANK_FROM",
    "DEFAULT_TDP_W",
    "MAX_GPU_INDEX",
    "NOT_A_NUMBER",
    "NO_MEMORY_SENSOR",
    "REJECT_REASONS",
    "SENTINELS",
    "TDP_W",
    "TS_RANGE",
    "bad_gpu_indices",
    "bad_times",
    "check",
    "check_columns",
    "gpu_index",
    "is_time",
    "has_memory_sensor",
    "is_blank",
    "model_key",
    "plausible",
    "reason",
    "screen",
    "tdp_w",
    "time_problem",
]
