"""One board's life in a simulated slot: its traits, its fate, and its precursor events.

A board is drawn whole when it is installed, from a random stream keyed by (seed, slot,
generation), so the fleet is the same whatever the chunking. Its failure time is exponential
(memoryless, so an installed board of any age fails at the fleet rate); the precursor that leads
to it is generated at once as per-step event counts on the sample grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuwarden.sim import calib as C
from gpuwarden.telemetry import GpuId

# Sparse event channels: each feeds one or two counter fields.
SBE, DBE, REMAP_C, REMAP_U, REPLAY = "sbe", "dbe", "remap_c", "remap_u", "replay"
NVL_FLIT, NVL_DATA, NVL_REPLAY, NVL_RECOVERY = "nvl_flit", "nvl_data", "nvl_replay", "nvl_rec"
CHANNELS: tuple[str, ...] = (
    SBE,
    DBE,
    REMAP_C,
    REMAP_U,
    REPLAY,
    NVL_FLIT,
    NVL_DATA,
    NVL_REPLAY,
    NVL_RECOVERY,
)

# Random-stream identifiers (the first element of every key).
STREAM_LIFE, STREAM_BACKGROUND, STREAM_NOISE, STREAM_WORK, STREAM_INIT = 1, 2, 3, 4, 5
STREAM_DRIFT = 6


def keyed_rng(seed: int, *key: int) -> np.random.Generator:
    """A generator that depends only on ``seed`` and ``key``: chunk-size independent."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


@dataclass
class XidRecord:
    """An event waiting to be emitted: ``kind`` is an ``Event`` kind."""

    ts: float
    life: int
    kind: str
    code: int | None = None
    detail: str = ""
    needs_busy: bool = False  # application Xids only happen while a job runs
    background: bool = False  # benign noise: not shown while the slot is down


@dataclass
class Lifetime:
    """One board in one slot, from install (``start_ts``) to failure (``fail_ts``)."""

    id: int
    slot: int
    gen: int
    gpu: GpuId
    start_ts: float
    start_step: int  # first sample it appears in
    fail_ts: float
    fail_step: int  # first sample it is missing from
    repair_s: float
    kind: str
    xid: int | None
    precursor_start_ts: float | None
    lookalike: str = ""
    gpu_off_c: float = 0.0
    mem_off_c: float = 0.0
    theta_scale: float = 1.0
    idle_scale: float = 1.0
    sbe_per_day: float = 0.0
    burst_per_day: float = 0.0
    pcie_blip_per_day: float = 0.0
    pcie_steady_per_h: float = 0.0
    app_factor: float = 1.0
    # failure-mode specifics read by the dense fields
    cool_amp_c: float = 0.0
    cool_core_ratio: float = 0.0
    cool_shape: float = 1.0
    precursor_step: int = 0
    width_drop_step: int | None = None
    width_after: int = 16
    gen_after: int | None = None
    remap_failure_step: int | None = None
    events: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    xids: list[XidRecord] = field(default_factory=list)

    @property
    def end_ts(self) -> float:
        """When the slot is filled again."""
        return self.fail_ts + self.repair_s


@dataclass(frozen=True)
class LifeContext:
    """What drawing a board needs from the fleet."""

    seed: int
    start_ts: float  # the simulation's first sample
    step_s: int
    failure_rate_per_day: float  # already multiplied by accel
    sudden_fraction: float
    lookalike_fraction: float
    kinds: tuple[str, ...]
    hbm_sudden_fraction: float = 0.0
    precursor_shape: str = "accelerating"
    precursor_magnitude: float = 1.0
    precursor_magnitude_sd: float = 0.0
    precursor_length: float = 1.0
    background_noise: float = 1.0
    pcie_noise: float = 1.0
    counter_scale: float = 1.0

    def step_at(self, ts: float) -> int:
        """Index of the first sample at or after ``ts``."""
        return int(np.ceil((ts - self.start_ts) / self.step_s - 1e-9))


def _uuid(rng: np.random.Generator) -> str:
    h = rng.bytes(16).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _pick(rng: np.random.Generator, weights: dict[str, float], allowed: tuple[str, ...]) -> str:
    names = [k for k in weights if not allowed or k in allowed]
    w = np.array([weights[k] for k in names], dtype=float)
    return names[int(rng.choice(len(names), p=w / w.sum()))]


def _allowed(ctx: LifeContext, kind: str) -> bool:
    # a sudden HBM failure is drawn as an HBM failure, so naming either allows the draw
    hbm = (C.HBM, C.HBM_SUDDEN)
    return (
        not ctx.kinds or kind in ctx.kinds or (kind == C.HBM and any(k in ctx.kinds for k in hbm))
    )


def _draw_kind(ctx: LifeContext, rng: np.random.Generator) -> str:
    sudden_ok = [k for k in C.SUDDEN_MIX_COUNTS if _allowed(ctx, k)]
    slow_ok = [k for k in C.PRECURSOR_KINDS if _allowed(ctx, k)]
    sudden = rng.random() < ctx.sudden_fraction
    if sudden and sudden_ok or not slow_ok:
        return _pick(rng, C.SUDDEN_MIX_COUNTS, tuple(sudden_ok))
    return _pick(rng, C.PRECURSOR_MIX_COUNTS, tuple(slow_ok))


def _hbm_sudden_share(ctx: LifeContext) -> float:
    """``hbm_sudden_fraction``, or 0 / 1 when ``kinds`` names only one of the two HBM kinds."""
    if C.HBM_SUDDEN in ctx.kinds and C.HBM not in ctx.kinds:
        return 1.0
    if C.HBM in ctx.kinds and C.HBM_SUDDEN not in ctx.kinds:
        return 0.0
    return ctx.hbm_sudden_fraction


def new_lifetime(
    ctx: LifeContext,
    life_id: int,
    slot: int,
    gen: int,
    slot_gpu: GpuId,
    install_ts: float,
    *,
    initial: bool,
) -> Lifetime:
    """Draw one board: identity, benign traits, failure time and kind, precursor events."""
    rng = keyed_rng(ctx.seed, STREAM_LIFE, slot, gen)
    gpu = slot_gpu._replace(uuid=_uuid(rng))
    look = ""
    if rng.random() < ctx.lookalike_fraction:
        look = _pick(rng, C.LOOKALIKE_SPLIT, ())
    # Look-alikes never fail, so the others carry the whole fleet rate.
    rate = 0.0 if look else ctx.failure_rate_per_day / max(1e-9, 1.0 - ctx.lookalike_fraction)
    ttf_s = rng.exponential(86400.0 / rate) if rate > 0 else np.inf
    fail_ts = (ctx.start_ts if initial else install_ts) + ttf_s
    kind = _draw_kind(ctx, rng)
    # Its own stream: with hbm_sudden_fraction 0 every board is drawn as it was before.
    hbm = keyed_rng(ctx.seed, STREAM_LIFE, slot, gen, 2)
    if kind == C.HBM and hbm.random() < _hbm_sudden_share(ctx):
        kind = C.HBM_SUDDEN
    repair_kind = C.HBM if kind == C.HBM_SUDDEN else kind
    repair = C.draw_repair_s(
        repair_kind if repair_kind in C.REPAIR_QUANTILES_DAYS else "pooled", rng.random()
    )
    life = Lifetime(
        id=life_id,
        slot=slot,
        gen=gen,
        gpu=gpu,
        start_ts=install_ts,
        start_step=ctx.step_at(install_ts),
        fail_ts=float(fail_ts),
        fail_step=ctx.step_at(fail_ts) if np.isfinite(fail_ts) else 2**62,
        repair_s=repair,
        kind=kind,
        xid=None,
        precursor_start_ts=None,
        lookalike=look,
    )
    _draw_traits(life, rng, ctx.background_noise, ctx.pcie_noise)
    if np.isfinite(fail_ts):
        if kind in C.PRECURSOR_KINDS:
            _draw_precursor(ctx, life, rng)
        elif kind == C.HBM_SUDDEN:
            _draw_ue_burst(ctx, life, hbm)
        else:
            _draw_sudden(life, rng)
    return life


def _lognormal(rng: np.random.Generator, median: float, sd: float) -> float:
    return float(median * np.exp(sd * rng.standard_normal()))


def _draw_traits(
    life: Lifetime, rng: np.random.Generator, noise: float = 1.0, pcie_noise: float = 1.0
) -> None:
    life.gpu_off_c = 1.5 * rng.standard_normal()
    life.mem_off_c = 1.5 * rng.standard_normal() + 0.3 * life.gpu_off_c
    life.theta_scale = 1.0 + 0.05 * rng.standard_normal()
    life.idle_scale = 1.0 + 0.05 * rng.standard_normal()
    if rng.random() < C.BASE_SBE_SHARE:
        life.sbe_per_day = _lognormal(rng, C.BASE_SBE_MEDIAN_PER_DAY, 1.5)
    life.burst_per_day = C.BURST_RATE_ANY_PER_DAY
    life.pcie_blip_per_day = C.PCIE_BLIP_PER_DAY
    look = life.lookalike
    if look == "sbe_stable":
        life.sbe_per_day = _lognormal(rng, C.STABLE_SBE_MEDIAN_PER_DAY, 1.0)
    elif look == "sbe_bursty":
        life.burst_per_day = C.BURST_RATE_PER_DAY * rng.uniform(0.5, 2.0)
    elif look == "pcie_noisy":
        life.pcie_blip_per_day = C.PCIE_NOISY_BLIP_PER_DAY * rng.uniform(0.5, 2.0)
        life.pcie_steady_per_h = rng.uniform(0.05, 0.5)
    elif look == "hot_mem":
        life.mem_off_c += rng.uniform(6.0, 12.0)
    elif look == "app_flaky":
        life.app_factor = C.APP_FLAKY_FACTOR
    if noise != 1.0:  # the randomized family's benign-noise level; 1 leaves the draw as it was
        life.sbe_per_day *= noise
        life.burst_per_day *= noise
        life.pcie_blip_per_day *= noise
        life.pcie_steady_per_h *= noise
    if pcie_noise != 1.0:  # the family's PCIe noise apart from the SBE noise (wave 24)
        life.pcie_blip_per_day *= pcie_noise
        life.pcie_steady_per_h *= pcie_noise


def _draw_sudden(life: Lifetime, rng: np.random.Generator) -> None:
    ts, lid = life.fail_ts, life.id
    if life.kind == C.GSP:
        life.xid = C.XID_GSP_RPC_TIMEOUT if rng.random() < 0.7 else C.XID_GSP_ERROR
        life.xids += [XidRecord(ts, lid, "xid", life.xid), XidRecord(ts, lid, "gpu_requires_reset")]
    elif life.kind == C.SRAM:
        life.xid = C.XID_UNCONTAINED_ECC
        life.xids.append(XidRecord(ts, lid, "xid", life.xid, "SRAM uncorrectable"))
    elif life.kind == C.BUS_DROP:
        life.xid = C.XID_FELL_OFF_BUS
        life.xids += [XidRecord(ts, lid, "xid", life.xid), XidRecord(ts, lid, "gpu_lost")]


def _draw_ue_burst(ctx: LifeContext, life: Lifetime, rng: np.random.Generator) -> None:
    """An HBM failure with no corrected precursor (Calchas: 34 of 39 devices): a burst of
    uncorrectable errors on distinct rows of one bank in the last sample before the failure.

    Each row is remapped while the bank has spare rows (``HBM_SPARE_ROWS_PER_BANK``): Xid 48
    and 94 (contained) and Xid 63 for each. A burst past the spare rows fails to remap (Xid
    64, ``remapped_rows_failure``); a smaller one ends in an uncontained error (Xid 95) or in
    the board being pulled after its DBEs (Xid 48), half and half.
    """
    n = C.draw_ue_burst(rng.random())
    remapped = min(n, C.HBM_SPARE_ROWS_PER_BANK)
    step = max(life.fail_step - 1, life.start_step)
    life.precursor_step = step
    lid, fts = life.id, life.fail_ts
    at = fts - rng.uniform(0, ctx.step_s, remapped)
    for t in np.sort(at):
        life.xids += [
            XidRecord(float(t), lid, "xid", C.XID_DBE),
            XidRecord(float(t), lid, "xid", C.XID_CONTAINED_ECC),
            XidRecord(float(t), lid, "xid", C.XID_ROW_REMAP, "uncorrectable"),
        ]
    one = np.array([step], dtype=np.int64)
    life.events = {
        DBE: (one, np.array([float(n)])),
        REMAP_U: (one, np.array([float(remapped)])),
    }
    if n > C.HBM_SPARE_ROWS_PER_BANK:
        life.xid = C.XID_ROW_REMAP_FAILURE
        life.remap_failure_step = step
        life.xids.append(XidRecord(fts, lid, "xid", life.xid, "row remap failure"))
    elif rng.random() < 0.5:
        life.xid = C.XID_UNCONTAINED_ECC
        life.xids.append(XidRecord(fts, lid, "xid", life.xid))
    else:
        life.xid = C.XID_DBE
        life.xids.append(XidRecord(fts, lid, "xid", life.xid))


def _grid(ctx: LifeContext, life: Lifetime) -> tuple[np.ndarray, np.ndarray]:
    """Sample steps of the precursor and each one's position u in (0, 1)."""
    k0 = life.precursor_step
    n = max(1, life.fail_step - k0)
    steps = np.arange(k0, k0 + n, dtype=np.int64)
    return steps, (np.arange(n) + 0.5) / n


def _counts(
    rng: np.random.Generator, profile: np.ndarray, peak_per_s: float, step_s: int
) -> np.ndarray:
    return rng.poisson(peak_per_s * step_s * profile)


def _profile(
    shape: str, u: np.ndarray, k: float, step_ts: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """The precursor's rate over its span as a share of the peak (``C.PRECURSOR_SHAPES``)."""
    if shape == "mixed":
        shape = C.PRECURSOR_SHAPES[int(rng.integers(0, len(C.PRECURSOR_SHAPES) - 1))]
    if shape == "accelerating":
        return np.exp(k * (u - 1.0))
    if shape == "exponential":
        return np.exp(rng.uniform(7.0, 12.0) * (u - 1.0))
    if shape == "linear":
        return u.astype(np.float64)
    if shape == "step":
        return (u >= rng.uniform(0.1, 0.8)).astype(np.float64)
    # bursts: hour-long blocks, each on with one probability, louder towards the end
    hour = np.floor((step_ts - step_ts[0]) / 3600.0).astype(np.int64)
    on = rng.random(int(hour[-1]) + 1) < rng.uniform(0.15, 0.6)
    on[-1] = True
    return on[hour] * (0.3 + 0.7 * u)


def _keep(steps: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nz = counts > 0
    return steps[nz], counts[nz].astype(np.float64)


def _draw_precursor(ctx: LifeContext, life: Lifetime, rng: np.random.Generator) -> None:
    """The warning signs before a failure of a kind with precursors.

    What the failure is (length, strength, how it ends) comes from ``rng``; the per-step event
    counts from a second stream, so the same board fails the same way at any ``step_s``.
    """
    median_h, sd_len, sd_int = C.PRECURSOR_SHAPE[life.kind]
    median_s = median_h * 3600 * ctx.precursor_length
    length = float(np.clip(_lognormal(rng, median_s, sd_len), C.MIN_PRECURSOR_S, C.MAX_PRECURSOR_S))
    start = max(life.fail_ts - length, life.start_ts + ctx.step_s)
    life.precursor_start_ts = min(start, life.fail_ts - ctx.step_s)
    life.precursor_step = min(ctx.step_at(life.precursor_start_ts), life.fail_step - 1)
    intensity = _lognormal(rng, 1.0, sd_int)
    k = rng.uniform(2.5, 7.0)
    ending, where, share, extra = rng.random(), rng.uniform(0.5, 0.97), rng.random(), rng.random()
    ev = keyed_rng(ctx.seed, STREAM_LIFE, life.slot, life.gen, 1)
    steps, u = _grid(ctx, life)
    n = len(steps)
    step_ts = ctx.start_ts + steps * float(ctx.step_s)
    lid, fts = life.id, life.fail_ts
    # the family's knobs draw from a stream of their own: at their defaults nothing changes
    knob = keyed_rng(ctx.seed, STREAM_LIFE, life.slot, life.gen, 3)
    profile = _profile(ctx.precursor_shape, u, k, step_ts, knob)
    mag = ctx.precursor_magnitude
    if ctx.precursor_magnitude_sd > 0:
        mag *= float(np.exp(ctx.precursor_magnitude_sd * knob.standard_normal()))
    intensity *= mag * ctx.counter_scale  # error counts; degrees undo counter_scale below
    if life.kind == C.HBM:
        peak = C.HBM_SBE_PEAK_PER_H * intensity / 3600
        sbe = _counts(ev, profile, peak, ctx.step_s)
        remap = ev.binomial(sbe, C.HBM_REMAP_PER_SBE * (0.5 + 1.5 * share))
        dbe = np.zeros_like(sbe)
        span = max(1, int(n * (0.05 + 0.25 * extra)))
        for i in ev.integers(n - span, n, ev.poisson(1.5 * (intensity / mag) ** 0.5)):
            dbe[i] += 1
            t = float(step_ts[i]) - ev.uniform(0, ctx.step_s)
            life.xids += [
                XidRecord(t, lid, "xid", C.XID_DBE),
                XidRecord(t, lid, "xid", C.XID_CONTAINED_ECC),
                XidRecord(t, lid, "xid", C.XID_ROW_REMAP, "uncorrectable"),
            ]
        for i in np.flatnonzero(remap):
            life.xids.append(XidRecord(float(step_ts[i]) - 1.0, lid, "xid", C.XID_ROW_REMAP))
        over = np.flatnonzero(peak * profile * 3600 >= C.XID_92_THRESHOLD_PER_H)
        if over.size:
            life.xids.append(XidRecord(float(step_ts[over[0]]), lid, "xid", C.XID_HIGH_SBE_RATE))
        if ending < 0.4:  # an uncontained error takes the GPU down at once
            life.xid = C.XID_UNCONTAINED_ECC
            life.xids.append(XidRecord(fts, lid, "xid", life.xid))
        elif ending < 0.8:  # "DBE > threshold": one more DBE, and operators pull the board
            life.xid = C.XID_DBE
            dbe[-1] += 1
            life.xids.append(XidRecord(float(step_ts[-1]) - 1.0, lid, "xid", C.XID_DBE))
        else:  # no spare row left: remap failure, reported until the board is pulled
            life.xid = C.XID_ROW_REMAP_FAILURE
            back = min(n - 1, max(1, int((300 + extra * 6 * 3600) / ctx.step_s)))
            life.remap_failure_step = int(steps[-back])
            t = float(step_ts[-back]) - 1.0
            life.xids.append(XidRecord(t, lid, "xid", life.xid, "row remap failure"))
        life.events = {
            SBE: _keep(steps, sbe),
            DBE: _keep(steps, dbe),
            REMAP_C: _keep(steps, remap),
            REMAP_U: _keep(steps, dbe.copy()),  # each DBE remaps its row
        }
    elif life.kind == C.PCIE:
        replay = _counts(ev, profile, C.PCIE_REPLAY_PEAK_PER_MIN * intensity / 60, ctx.step_s)
        life.events = {REPLAY: _keep(steps, replay)}
        if ending < 0.75:  # the link trains down to fewer lanes (sometimes a slower gen too)
            life.width_drop_step = int(steps[int(n * where)])
            life.width_after = 8 if share < 0.7 else 4
            if extra < 0.3:
                life.gen_after = -1
        life.xid = C.XID_FELL_OFF_BUS
        life.xids += [XidRecord(fts, lid, "xid", life.xid), XidRecord(fts, lid, "gpu_lost")]
    elif life.kind == C.COOLING:
        # degrees, not counts: the family's magnitude acts through its 0.35th power, and the
        # scale of the error counters (another generator's units) not at all
        base = intensity / (mag * ctx.counter_scale)
        life.cool_amp_c = C.COOLING_MEM_RISE_C * base * mag**0.35
        life.cool_core_ratio = 0.2 + 0.3 * share
        life.cool_shape = 1.0 + 2.0 * extra
        if ending < 0.5:  # thermal shutdown drops it off the bus; else operators pull it
            life.xid = C.XID_FELL_OFF_BUS
            life.xids += [XidRecord(fts, lid, "xid", life.xid), XidRecord(fts, lid, "gpu_lost")]
    elif life.kind == C.NVLINK:
        base = C.NVLINK_CRC_PEAK_PER_MIN * intensity / 60
        life.events = {
            NVL_FLIT: _keep(steps, _counts(ev, profile, base, ctx.step_s)),
            NVL_DATA: _keep(steps, _counts(ev, profile, 0.25 * base, ctx.step_s)),
            NVL_REPLAY: _keep(steps, _counts(ev, profile, 0.5 * base, ctx.step_s)),
            NVL_RECOVERY: _keep(steps, _counts(ev, profile, 0.01 * base, ctx.step_s)),
        }
        if ending < 0.5:  # recoverable NVLink errors logged before the link gives up
            for i in ev.integers(int(n * 0.7), n, 1 + int(3 * share)):
                life.xids.append(XidRecord(float(step_ts[i]), lid, "xid", C.XID_NVLINK))
        life.xid = C.XID_NVLINK
        life.xids.append(XidRecord(fts, lid, "xid", life.xid))
