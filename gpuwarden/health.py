"""The health vocabulary: GPU states, the at-risk threshold, hard signals and the Xid table.

Every layer that says how a GPU is doing uses these words and only these:

    GpuState         ok / at-risk / unhealthy: what the scheduler, the Kubernetes label, the
                     Slurm feature and ``gpuwarden_gpu_state{state=...}`` carry
    MISSING          what a person sees for a GPU that stopped reporting (not a scheduling state:
                     the scheduler keeps the last verdict until a signal says otherwise)
    at_risk_threshold  where the at-risk line comes from: the loaded model's card, or
                     ``DEFAULT_AT_RISK``; the one place that number is written
    HARD_SIGNALS     what makes a GPU unhealthy at once, whatever a model says, each with
                     NVIDIA's recommended action
    XIDS / describe  NVIDIA's Xid codes: whose fault each is (hardware, application, driver),
                     whether it is fatal, and what to do. ``XIDS`` / ``FATAL_XIDS`` are the
                     shipped table (the model's features); ``xid_table()`` / ``describe`` the
                     table in force, edited by the ``xid_severity`` file (``use_xid_severity``)

The Xid table is condensed from NVIDIA's "Xid Errors" catalogue (docs.nvidia.com/deploy/
xid-errors) and its row-remapping / DBE guidance. ``hardware`` Xids point at the GPU, its memory,
its link or its firmware; ``application`` ones at the code running on it (a bad kernel, an
illegal address), which is why 13, 31, 43 and 45 never count against a GPU's health.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.telemetry import GpuId, time_unknown
from gpuwarden.wording import plural

# -- states -------------------------------------------------------------------------------


class GpuState(StrEnum):
    """Scheduling state of one GPU, worst last (``worst`` of states is the sickest).

    ``at-risk`` GPUs take only interruptible work (a checkpointed batch job loses minutes when
    the GPU dies; an inference replica loses requests). ``unhealthy`` GPUs take nothing new,
    like a node tainted ``NoSchedule``; running work checkpoints and leaves.
    """

    OK = "ok"
    AT_RISK = "at-risk"
    UNHEALTHY = "unhealthy"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def parse(cls, value: object) -> GpuState:
        """``"at-risk"`` (or ``"at_risk"``) -> ``GpuState.AT_RISK``; InputError otherwise."""
        try:
            return cls(str(value).strip().lower().replace("_", "-"))
        except ValueError:
            raise InputError(f"state must be ok, at-risk or unhealthy, not {value!r}") from None


_RANK = {GpuState.OK: 0, GpuState.AT_RISK: 1, GpuState.UNHEALTHY: 2}


def worst(states: Iterable[GpuState]) -> GpuState:
    """The worst of ``states`` (``ok`` for none): a node is as sick as its sickest GPU."""
    return max(states, key=lambda s: s.rank, default=GpuState.OK)


#: A GPU that stopped reporting, as the dashboard and summary show it.
MISSING = "missing"
#: What a person sees, worst first: the three states, and missing.
SHOWN_STATES: tuple[str, ...] = (
    GpuState.UNHEALTHY.value,
    GpuState.AT_RISK.value,
    MISSING,
    GpuState.OK.value,
)

# -- the at-risk threshold ----------------------------------------------------------------

#: Calibrated risk at which a GPU is at risk when the model's card names no threshold: 0.7
#: means a 70% chance of failing within the model's horizon.
DEFAULT_AT_RISK = 0.7


#: The ``at_risk_threshold`` setting, when one is in force (``use_at_risk_threshold``).
_line: float | None = None


def at_risk_threshold(card: Mapping[str, Any] | None = None) -> float:
    """The at-risk line: the ``at_risk_threshold`` setting when one is in force, else
    ``card_threshold``."""
    return _line if _line is not None else card_threshold(card)


def card_threshold(card: Mapping[str, Any] | None = None) -> float:
    """The model card's own line (``threshold``), else the default; the setting aside. A model
    trained from another carries this line over, whatever line the operator runs at."""
    if card is not None and card.get("threshold") is not None:
        return float(card["threshold"])
    return DEFAULT_AT_RISK


def use_at_risk_threshold(value: str | float | None) -> float | None:
    """Put the ``at_risk_threshold`` setting in force over every model card (None or "": the
    card's line again). A fleet whose healthy boards log many times the training fleets'
    correctable errors needs a higher line (docs/models.md, "Choosing the at-risk line"). A value that is not a
    risk above 0 and at most 1 is a ``ConfigError`` naming the setting. Returns the line in
    force, or None."""
    global _line
    text = "" if value is None else str(value).strip()
    if not text:
        _line = None
        return None
    try:
        line = float(text)
    except ValueError:
        line = math.nan
    if not 0 < line <= 1:
        raise ConfigError(
            f"at_risk_threshold must be a risk above 0 and at most 1 (empty: the model "
            f"card's), got {value!r}"
        )
    _line = line
    return _line


def threshold_text(threshold: float) -> str:
    """``">= 0.7"``: how pages and alerts write the at-risk line."""
    return f">= {threshold:g}"


#: What to do with an at-risk GPU.
AT_RISK_ACTION = (
    "Move its work to interruptible jobs and watch the signals; drain it if they keep rising."
)

# -- Xids -----------------------------------------------------------------------------------

XidClass = Literal["hardware", "application", "driver", "ignore"]
#: The classes a severity file may give a code. Only ``hardware`` Xids are evidence against a
#: GPU; ``ignore`` drops a code from the hard signals and the Xid reasons.
XID_CLASSES: tuple[str, ...] = ("hardware", "application", "driver", "ignore")


@dataclass(frozen=True)
class Xid:
    code: int
    name: str
    cls: XidClass
    fatal: bool
    action: str


_CATALOGUE = (
    Xid(13, "Graphics engine exception", "application", False,
        "Application fault: check the job's code (illegal instruction, out-of-range access)."),
    Xid(31, "GPU memory page fault", "application", False,
        "Application fault: illegal memory access by the job; debug the application."),
    Xid(32, "Invalid or corrupted push buffer stream", "driver", False,
        "Check the driver version and the PCIe link; restart the job."),
    Xid(43, "GPU stopped processing", "application", False,
        "Application fault: the job's context was reset; the GPU itself is fine."),
    Xid(45, "Preemptive cleanup", "driver", False,
        "Follows another error or a killed process; look at the Xid before it."),
    Xid(48, "Double-bit ECC error", "hardware", True,
        "Drain the GPU and reset it; if DBEs recur or row remapping fails, replace the GPU (RMA)."),
    Xid(61, "Internal micro-controller breakpoint", "hardware", False,
        "Reset the GPU; if it recurs, collect a bug report and contact support."),
    Xid(62, "Internal micro-controller halt", "hardware", True,
        "Drain and reset the GPU; if it recurs, contact support."),
    Xid(63, "ECC page retirement or row remapping recorded", "hardware", False,
        "Memory repaired itself; schedule a GPU reset to apply it and watch remap counts."),
    Xid(64, "ECC page retirement or row remapper failure", "hardware", True,
        "Row remapping failed: drain the GPU and replace it (RMA)."),
    Xid(74, "NVLink error", "hardware", True,
        "Drain the node; reset the GPUs, check NVLink/NVSwitch cabling; replace on recurrence."),
    Xid(79, "GPU has fallen off the bus", "hardware", True,
        "Drain the node; reseat or replace the GPU, check the PCIe riser/slot and power."),
    Xid(92, "High single-bit ECC error rate", "hardware", False,
        "NVIDIA says no action is needed; gpuwarden watches the SBE trend instead."),
    Xid(94, "Contained ECC error", "hardware", True,
        "The affected application was stopped; reset the GPU to remap the row, then resume."),
    Xid(95, "Uncontained ECC error", "hardware", True,
        "Every application on the GPU is affected: drain and reset the GPU; replace on recurrence."),
    Xid(119, "GSP RPC timeout", "hardware", True,
        "GPU System Processor stopped answering: drain and reset the GPU; update firmware/driver."),
    Xid(120, "GSP error", "hardware", True,
        "GPU System Processor error: drain and reset the GPU; replace on recurrence."),
)  # fmt: skip


#: The shipped table. The model's features (``models.panel``: Xid counts by class, fatal
#: Xids) are always computed with it, since the shipped model was trained on it.
XIDS: Mapping[int, Xid] = MappingProxyType({x.code: x for x in _CATALOGUE})

#: Xids that mark a GPU unhealthy at once in the shipped table (``xid_table().fatal`` is the
#: table in force, with the user's severity file applied).
FATAL_XIDS: frozenset[int] = frozenset(x.code for x in _CATALOGUE if x.fatal)
APPLICATION_XIDS: frozenset[int] = frozenset(x.code for x in _CATALOGUE if x.cls == "application")


def _unknown_xid(code: int) -> Xid:
    return Xid(
        code, f"Xid {code}", "hardware", False, "Look the code up in NVIDIA's Xid catalogue."
    )


@dataclass(frozen=True)
class XidTable:
    """An Xid table: the shipped one, or the shipped one with a severity file's rows on top.

    ``fatal`` (codes that make a GPU unhealthy at once) holds only ``hardware`` codes: an
    application, driver or ignored Xid never condemns a GPU."""

    entries: Mapping[int, Xid]
    source: str = "built-in"
    fatal: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        fatal = frozenset(x.code for x in self.entries.values() if x.fatal and x.cls == "hardware")
        object.__setattr__(self, "fatal", fatal)

    def describe(self, code: int) -> Xid:
        """The entry for ``code``; unknown codes count as hardware and non-fatal."""
        entry = self.entries.get(code)
        return entry if entry is not None else _unknown_xid(code)


DEFAULT_XID_TABLE = XidTable(XIDS)
_active: XidTable = DEFAULT_XID_TABLE


def xid_table() -> XidTable:
    """The Xid table in force: the shipped one, or the one ``use_xid_severity`` loaded."""
    return _active


def describe(code: int) -> Xid:
    """The entry for ``code`` in the table in force; unknown codes count as hardware and
    non-fatal."""
    entry = _active.entries.get(code)
    return entry if entry is not None else _unknown_xid(code)


_XID_KEYS = {"name", "class", "fatal", "action"}


def load_xid_severity(path: str | os.PathLike[str]) -> XidTable:
    """The shipped table with the rows of a severity file (TOML) on top::

        [xid.13]                    # the code, an integer
        class = "application"       # hardware, application, driver or ignore
        fatal = false               # only a hardware Xid may be fatal
        action = "Tell the job's owner."
        name = "Graphics engine exception"   # optional

    Keys left out keep the shipped entry's value; a code the shipped table does not know needs
    a ``class``. Raises ``ConfigError`` naming the file and the code for anything else."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"xid_severity file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"xid_severity file {path} cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"xid_severity file {path} is not valid TOML: {exc}") from exc
    extra = sorted(set(data) - {"xid"})
    if extra:
        raise ConfigError(
            f"{path}: unknown {plural(len(extra), 'table')} {', '.join(extra)}; rows go under [xid.CODE]"
        )
    rows = data.get("xid", {})
    if not isinstance(rows, dict):
        raise ConfigError(f"{path}: xid must be a table of [xid.CODE] rows")
    entries = dict(XIDS)
    for key, row in rows.items():
        entries_code = _xid_code(path, key)
        entries[entries_code] = _xid_row(path, entries_code, row)
    return XidTable(MappingProxyType(entries), source=str(path))


def _xid_code(path: object, key: str) -> int:
    try:
        code = int(key)
    except ValueError:
        raise ConfigError(f"{path}: [xid.{key}]: the code must be an integer Xid number") from None
    if code < 0:
        raise ConfigError(f"{path}: [xid.{key}]: the code must not be negative")
    return code


def _xid_row(path: object, code: int, row: object) -> Xid:
    where = f"{path}: [xid.{code}]"
    if not isinstance(row, dict):
        raise ConfigError(f"{where} must be a table (class, fatal, action, name)")
    unknown = sorted(set(row) - _XID_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown {plural(len(unknown), 'key')} {', '.join(unknown)} (known: class, fatal, action, name)"
        )
    base = XIDS.get(code)
    if base is None and "class" not in row:
        raise ConfigError(f"{where}: the shipped table does not know Xid {code}; give its class")
    base = base or _unknown_xid(code)
    cls = row.get("class", base.cls)
    if cls not in XID_CLASSES:
        raise ConfigError(f"{where}: class {cls!r} must be one of {', '.join(XID_CLASSES)}")
    fatal = row.get("fatal", base.fatal and cls == "hardware")
    if not isinstance(fatal, bool):
        raise ConfigError(f"{where}: fatal must be true or false, not {fatal!r}")
    if fatal and cls != "hardware":
        raise ConfigError(f"{where}: a {cls} Xid cannot be fatal: only hardware Xids condemn a GPU")
    for key in ("action", "name"):
        if key in row and not isinstance(row[key], str):
            raise ConfigError(f"{where}: {key} must be a string")
    return Xid(code, row.get("name", base.name), cls, fatal, row.get("action", base.action))


def use_xid_severity(path: str | os.PathLike[str] | None) -> XidTable:
    """Put the table from the severity file ``path`` in force (the shipped one for None or
    ""), for ``describe``, the hard signals, the rules, the dashboard and the reasons. The
    model's features keep the shipped table. Returns the table now in force."""
    global _active
    _active = load_xid_severity(path) if path else DEFAULT_XID_TABLE
    return _active


# -- hard signals ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HardSignal:
    """Something that makes a GPU unhealthy at once.

    ``source``: the DCGM field or event it is read from. ``priority``: when a GPU shows several,
    the lowest names the state and its action (the most drastic: a failed remap means a new
    board, a reset may not). ``xid``: the Xid catalogue entry whose action applies.
    """

    name: str
    what: str
    source: str
    priority: int
    xid: int | None = None
    reset_action: str = ""

    @property
    def action(self) -> str:
        return describe(self.xid).action if self.xid is not None else self.reset_action


ROW_REMAP_FAILURE = HardSignal(
    "row_remap_failure", "row remapping failed", "DCGM_FI_DEV_ROW_REMAP_FAILURE", 0, xid=64
)
GPU_LOST = HardSignal("gpu_lost", "GPU lost (fell off the bus)", "event gpu_lost", 1, xid=79)
DOUBLE_BIT_ERROR = HardSignal(
    "double_bit_error", "double-bit ECC error", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2, xid=48
)
FATAL_XID = HardSignal("fatal_xid", "fatal Xid", "event xid", 3)
GPU_REQUIRES_RESET = HardSignal(
    "gpu_requires_reset",
    "GPU requires a reset",
    "event gpu_requires_reset",
    4,
    reset_action="Drain the GPU and reset it (nvidia-smi -r); replace it if it recurs.",
)
HARD_SIGNALS: tuple[HardSignal, ...] = (
    ROW_REMAP_FAILURE,
    GPU_LOST,
    DOUBLE_BIT_ERROR,
    FATAL_XID,
    GPU_REQUIRES_RESET,
)
#: Event kinds that are hard signals by themselves (an Xid only when fatal).
HARD_EVENTS: dict[str, HardSignal] = {
    "gpu_lost": GPU_LOST,
    "gpu_requires_reset": GPU_REQUIRES_RESET,
}
#: The samples hard signals are read from: volatile and aggregate DBE counts, remap failure.
DBE_FIELDS: tuple[str, ...] = ("ecc_dbe_volatile_total", "ecc_dbe_aggregate_total")
HARD_FIELDS: tuple[str, ...] = (*DBE_FIELDS, "remapped_rows_failure")


_XID_SAID = re.compile(r"\bXid (\d+)\b")


def xids_said(text: str) -> frozenset[int]:
    """The Xid codes a reason names, by number ("3 fatal Xids in 24 h (Xid 95, ...)") or by a
    hard signal's words ("1 double-bit ECC error (ecc_dbe_volatile_total)" is Xid 48's). Two
    reasons that name the same codes tell a person the same thing to do."""
    codes = {int(c) for c in _XID_SAID.findall(text)}
    low = text.lower()
    codes.update(s.xid for s in HARD_SIGNALS if s.xid is not None and s.what.lower() in low)
    return frozenset(codes)


def event_signal(kind: str, code: float | None = None, detail: str = "") -> HardSignal | None:
    """The hard signal an event is, if any: a lost GPU, a reset needed, a fatal Xid.

    An event of unknown time (``telemetry.time_unknown(detail)``: an Xid already there when a
    collector started, which may be days old and already dealt with) is none: it is shown and
    kept, but never makes a GPU unhealthy by itself."""
    if time_unknown(detail):
        return None
    if kind == "xid":
        if code is None or code != code or int(code) not in _active.fatal:  # NaN: code unknown
            return None
        return FATAL_XID
    return HARD_EVENTS.get(kind)


def event_action(kind: str, code: float | None = None) -> str:
    """NVIDIA's action for an event: the Xid catalogue's, or the hard signal's."""
    if kind == "xid" and code is not None and code == code:
        return describe(int(code)).action
    signal = HARD_EVENTS.get(kind)
    return signal.action if signal else ""


# -- records: what a scorer says, and what gpuwarden decided ---------------------------------


class Reason(str):
    """One reason, in words, with the features behind it (name -> value at scoring time).

    A ``str``, so everything that prints, joins or compares reasons takes it as the sentence;
    ``features`` is what a report or a person checking the model reads next to it.
    """

    features: Mapping[str, float]

    def __new__(cls, text: str, features: Mapping[str, float] | None = None) -> Reason:
        self = super().__new__(cls, text)
        self.features = MappingProxyType(dict(features or {}))
        return self

    def to_json(self) -> dict[str, Any]:
        return {"text": str(self), "features": _finite(self.features)}

    @classmethod
    def from_json(cls, obj: object) -> Reason:
        if isinstance(obj, str):
            return cls(obj)
        if isinstance(obj, Mapping) and isinstance(obj.get("text"), str):
            feats = obj.get("features") or {}
            return cls(obj["text"], {str(k): float(v) for k, v in dict(feats).items()})
        raise InputError(f"not a reason: {obj!r}")


def _finite(features: Mapping[str, float]) -> dict[str, float]:
    # JSON has no NaN: a feature not measured is left out (missing is never 0)
    return {k: round(float(v), 6) for k, v in features.items() if math.isfinite(float(v))}


@dataclass(frozen=True)
class RiskAssessment:
    """One scorer's verdict on one GPU at ``ts`` (Unix s): what the model (``gpuwarden.models.
    assess``), the hard-signal assessor or an Alertmanager alert says.

    ``risk``: calibrated probability of failing within the model's horizon, NaN when unknown
    (never 0 for "no data"). ``state``: the scorer's own state, when it has one (the model's:
    unhealthy on a hard signal in its window, at-risk from its threshold). ``hard_signal``: set
    when a double-bit error, row-remap failure, lost GPU or fatal Xid was seen ("Xid 79 (GPU has
    fallen off the bus)"); it makes the GPU unhealthy at once. ``hard_signal_ts``: when that
    signal happened, if known; a person's override is broken only by a signal newer than the
    override. ``reasons``: sentences, ``Reason`` where the scorer knows the features behind
    them. ``action``: what to do, for people ("drain and reset the GPU"). ``rule``: the rules
    beside the model that hold ("pcie_link_degraded"), which make the GPU at-risk whatever its
    risk, for as long as they hold.
    """

    gpu: GpuId
    ts: float
    risk: float = math.nan
    hard_signal: str | None = None
    reasons: tuple[str, ...] = ()
    action: str = ""
    hard_signal_ts: float | None = None
    state: GpuState | None = None
    rule: str | None = None

    @classmethod
    def coerce(cls, obj: Any) -> RiskAssessment:
        """A user's ``--assess`` function may return its own records with the same attribute
        names; gpuwarden's own scorers return ``RiskAssessment``."""
        if isinstance(obj, cls):
            return obj
        try:
            risk = getattr(obj, "risk", math.nan)
            state = getattr(obj, "state", None)
            return cls(
                gpu=obj.gpu,
                ts=float(obj.ts),
                risk=math.nan if risk is None else float(risk),
                hard_signal=getattr(obj, "hard_signal", None) or None,
                reasons=tuple(
                    r if isinstance(r, Reason) else str(r)
                    for r in getattr(obj, "reasons", ()) or ()
                ),
                action=str(getattr(obj, "action", "") or ""),
                hard_signal_ts=getattr(obj, "hard_signal_ts", None),
                state=None if state is None else GpuState.parse(state),
                rule=str(getattr(obj, "rule", "") or "") or None,
            )
        except (AttributeError, TypeError, ValueError, InputError) as exc:
            raise InputError(f"not a risk assessment: {obj!r} ({exc})") from exc


#: Why a GPU is in its state: the model's score, a hard signal, a person's override, the
#: hysteresis hold (the score fell but has not stayed low long enough), an Alertmanager alert,
#: a new board in the slot, or a state restored after a restart.
CAUSES: tuple[str, ...] = (
    "model", "hard-signal", "override", "hysteresis", "alertmanager", "replaced", "restored",
)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """gpuwarden's decision on one GPU at ``ts``, as ``serve`` acted on it and the store keeps it.

    ``state`` is what the scheduler hooks were told; ``cause`` one of ``CAUSES``; ``since`` when
    the GPU entered ``state``; ``changed_from`` the state before when this verdict changed it
    (a transition), else None. ``threshold``: the at-risk line it was decided against.
    """

    ts: float
    gpu: GpuId
    state: GpuState
    risk: float = math.nan
    cause: str = "model"
    since: float | None = None
    changed_from: GpuState | None = None
    reasons: tuple[str, ...] = ()
    action: str = ""
    threshold: float = math.nan

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise InputError(
                f"verdict cause must be one of {', '.join(CAUSES)}, not {self.cause!r}"
            )
        if not math.isfinite(self.ts):
            raise InputError(f"verdict time {self.ts!r} is not a finite Unix time")


#: The columns ``Store.read_verdicts`` returns, one row per stored verdict.
VERDICT_COLUMNS: tuple[str, ...] = (
    "ts", "hostname", "gpu", "uuid", "state", "risk", "cause", "since", "changed_from",
    "reasons", "action", "threshold",
)  # fmt: skip


def state_changes(verdicts: Any) -> Any:
    """The rows of a ``read_verdicts`` frame where a GPU's state changes: each GPU's first row
    and every row whose state differs from that GPU's row before it, in the frame's order
    (by ts). What a reader that carries states forward needs, without the heartbeats that
    repeat them (``read_verdicts(changes=True)``)."""
    if len(verdicts) == 0:
        return verdicts
    order = verdicts.sort_values(["uuid", "ts"], kind="stable")
    state = order["state"].astype(str)
    new_gpu = order["uuid"].ne(order["uuid"].shift())
    keep = new_gpu | state.ne(state.shift())
    return verdicts.loc[order.index[keep.to_numpy()]].sort_index().reset_index(drop=True)


__all__ = [
    "APPLICATION_XIDS",
    "AT_RISK_ACTION",
    "CAUSES",
    "VERDICT_COLUMNS",
    "Reason",
    "state_changes",
    "RiskAssessment",
    "Verdict",
    "DBE_FIELDS",
    "DEFAULT_AT_RISK",
    "DOUBLE_BIT_ERROR",
    "FATAL_XID",
    "FATAL_XIDS",
    "GPU_LOST",
    "GPU_REQUIRES_RESET",
    "HARD_EVENTS",
    "HARD_FIELDS",
    "HARD_SIGNALS",
    "MISSING",
    "ROW_REMAP_FAILURE",
    "SHOWN_STATES",
    "XIDS",
    "XID_CLASSES",
    "DEFAULT_XID_TABLE",
    "XidTable",
    "load_xid_severity",
    "use_xid_severity",
    "xid_table",
    "GpuState",
    "HardSignal",
    "Xid",
    "XidClass",
    "at_risk_threshold",
    "describe",
    "event_action",
    "event_signal",
    "threshold_text",
    "worst",
]
