"""Constants of the simulated fleet: GPU models, failure calibration, Xid codes.

Every figure here is copied from a named public source (docs/simulator.md shows the
derivation); the simulator never reads /work/shared at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GpuModel:
    """Static facts of one GPU model, as ``nvidia-smi -q`` reports them for the SXM board.

    Thermal constants are ours: temperature = ambient + ``c0`` + ``theta`` x power (W), fitted
    so an idle board sits near 30-35 C and a board at its power limit near 65-75 C (core) and a
    few degrees more (HBM), which is what air-cooled HGX systems show.
    """

    name: str
    product: str  # nvidia-smi --query-gpu=name
    fb_total_mib: float  # memory.total
    fb_reserved_mib: float  # nvidia-smi -q "Reserved" (approximate)
    power_limit_w: float  # enforced.power.limit (default TDP)
    idle_power_w: float
    sm_clock_max_mhz: float  # clocks.max.sm
    sm_clock_idle_mhz: float
    mem_clock_mhz: float  # clocks.mem (HBM runs at one clock)
    pcie_gen_max: int  # pcie.link.gen.max
    pcie_width_max: int  # pcie.link.width.max
    nvlink_links: int
    gpu_max_op_c: float  # "GPU Max Operating Temp": software thermal slowdown above it
    gpu_slowdown_c: float  # "GPU Slowdown Temp": hardware slowdown
    mem_max_op_c: float  # "Memory Max Operating Temp"
    c0_gpu_c: float
    theta_gpu_c_per_w: float
    c0_mem_c: float
    theta_mem_c_per_w: float
    pci_bus_ids: tuple[str, ...]  # per GPU index on the DGX/HGX board
    #: Ampere and later remap HBM rows instead of retiring pages: retired_pages_* are absent.
    page_retirement: bool = False


_HGX_H100_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
_HGX_A100_BUS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")


def _bus(ids: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"00000000:{b}:00.0" for b in ids)


MODELS: dict[str, GpuModel] = {
    "A100-80GB": GpuModel(
        "A100-80GB",
        "NVIDIA A100-SXM4-80GB",
        81920.0,
        567.0,
        400.0,
        58.0,
        1410.0,
        210.0,
        1593.0,
        4,
        16,
        12,
        85.0,
        89.0,
        95.0,
        2.7,
        0.0957,
        4.0,
        0.1010,
        _bus(_HGX_A100_BUS),
    ),
    "H100-80GB": GpuModel(
        "H100-80GB",
        "NVIDIA H100 80GB HBM3",
        81559.0,
        346.0,
        700.0,
        70.0,
        1980.0,
        345.0,
        2619.0,
        5,
        16,
        18,
        87.0,
        89.0,
        95.0,
        4.9,
        0.0587,
        6.5,
        0.0620,
        _bus(_HGX_H100_BUS),
    ),
    "H200": GpuModel(
        "H200",
        "NVIDIA H200",
        143771.0,
        551.0,
        700.0,
        75.0,
        1980.0,
        345.0,
        3201.0,
        5,
        16,
        18,
        87.0,
        89.0,
        95.0,
        4.9,
        0.0590,
        7.0,
        0.0640,
        _bus(_HGX_H100_BUS),
    ),
}

# --- Failure rate --------------------------------------------------------------------------
#: Meta, "The Llama 3 Herd of Models" (2024), table 5: 268 GPU-attributed interruptions
#: (faulty GPU 148, HBM3 72, SRAM 19, GSP 17, SDC 6, thermal 6) in 54 days on 16,384 H100s.
META_GPU_FAILURES_PER_GPU_DAY = 268 / (54 * 16384)  # 3.03e-4
#: InfiniteHBD trace (stepfun-ai, SIGCOMM 2025): 158 GPU-class faults, 400 servers x 8 GPUs,
#: 348 days. A lower bound (one node fault can hide several GPUs); we default to Meta's rate.
INFINITEHBD_GPU_FAULTS_PER_GPU_DAY = 158 / (400 * 8 * 348)  # 1.42e-4

# --- Failure kinds -------------------------------------------------------------------------
HBM = "hbm_degradation"
PCIE = "pcie_degradation"
COOLING = "cooling_degradation"
NVLINK = "nvlink_degradation"
GSP = "gsp_error"
SRAM = "sram_uncorrectable"
BUS_DROP = "fell_off_bus"
SILENT = "silent_fault"
#: An HBM failure whose first uncorrectable error comes with no corrected one before it.
HBM_SUDDEN = "hbm_uncorrectable"
PRECURSOR_KINDS: tuple[str, ...] = (HBM, PCIE, COOLING, NVLINK)
SUDDEN_KINDS: tuple[str, ...] = (GSP, SRAM, BUS_DROP, SILENT, HBM_SUDDEN)

#: Fault counts behind the mix of failures that have precursors. InfiniteHBD GPU class:
#: "DBE > Threshold" 60 + "SBE > Threshold" 1 -> HBM, "PCI link width low" 25 -> PCIe,
#: "P2P Bandwidth Low" 3 -> NVLink, "Temperature High" 2 -> cooling; plus Meta Llama 3
#: HBM3 72 and thermal interface/sensor 6.
PRECURSOR_MIX_COUNTS: dict[str, float] = {HBM: 61 + 72, PCIE: 25, NVLINK: 3, COOLING: 2 + 6}
#: Counts behind the sudden mix. InfiniteHBD "device unknown error" 40 + "nvidia-smi Timeout" 9
#: + "GPU xid Error" 11 -> GSP hang, "GPU Lost" 5 + "device not found" 1 -> fell off the bus,
#: "Silent Data Corruption" 1 -> silent; plus Meta GSP 17, SRAM 19, SDC 6.
SUDDEN_MIX_COUNTS: dict[str, float] = {GSP: 60 + 17, SRAM: 19, BUS_DROP: 6, SILENT: 1 + 6}

#: Repair (slot empty) durations, days, at quantiles 0, 0.1, ..., 1 of InfiniteHBD fault_start ->
#: fault_end for the GPU-class faults mapped to each kind; kinds with under 10 records use the
#: pooled 158 GPU-class faults.
REPAIR_QUANTILES_DAYS: dict[str, tuple[float, ...]] = {
    HBM: (0.0031, 0.0086, 0.0089, 0.0092, 0.0095, 0.1611, 0.7909, 1.5387, 2.9842, 22.1455, 88.503),
    PCIE: (
        0.0085,
        0.0311,
        0.3212,
        0.9376,
        2.2132,
        2.9992,
        5.2217,
        7.0306,
        10.4714,
        17.0599,
        44.9702,
    ),
    GSP: (0.0077, 0.0086, 0.0094, 0.0116, 0.0481, 0.1368, 0.6194, 1.1711, 1.7868, 3.729, 17.0835),
    "pooled": (
        0.0031,
        0.0086,
        0.0092,
        0.0136,
        0.1184,
        0.6996,
        1.357,
        2.4569,
        4.1375,
        17.9483,
        91.9509,
    ),
}
MIN_REPAIR_S = 600.0  # a swap or reset takes at least ten minutes

# --- HBM failures without a corrected precursor (Calchas, Wu et al., USENIX ATC '24) ---------
#: Of the 39 accelerators with an uncorrectable error in the Calchas log (20,391 HBM errors,
#: 51 accelerators, 2022-2024), 34 had no corrected error before their first one or in its
#: hour (3 had one strictly before, 2 more in the same hour): the default share of HBM
#: failures that begin with an uncorrectable burst and no SBE ramp.
HBM_SUDDEN_FRACTION = 34 / 39
#: Uncorrectable errors in that first hour, at quantiles 0, 0.1, ..., 1 over the 39 devices:
#: 28 had one, 7 two, 1 four, and 3 a storm of 585-1,347 errors on as many rows of one bank.
HBM_UE_BURST_QUANTILES: tuple[float, ...] = (1, 1, 1, 1, 1, 1, 1, 1, 2, 2.4, 1347)
#: Spare rows a bank can remap into. NVIDIA's RMA policy replaces a GPU whose bank already has
#: 8 rows remapped for uncorrectable errors; more distinct rows in one bank fail to remap
#: (Xid 64, remapped_rows.failure).
HBM_SPARE_ROWS_PER_BANK = 8


def draw_ue_burst(u: float) -> int:
    """Uncorrectable errors in a sudden HBM failure's burst at uniform quantile ``u``:
    log-linear between the Calchas deciles."""
    q = np.log(np.asarray(HBM_UE_BURST_QUANTILES, dtype=np.float64))
    return max(1, int(round(float(np.exp(np.interp(u, np.linspace(0.0, 1.0, q.size), q))))))


def draw_repair_s(kind: str, u: float) -> float:
    """Repair time (s) at uniform quantile ``u``: log-linear between the InfiniteHBD deciles."""
    q = np.log(np.asarray(REPAIR_QUANTILES_DAYS.get(kind, REPAIR_QUANTILES_DAYS["pooled"])))
    days = float(np.exp(np.interp(u, np.linspace(0.0, 1.0, q.size), q)))
    return max(days * 86400.0, MIN_REPAIR_S)


# --- Precursors: (median length h, log-sd of length, log-sd of intensity) -------------------
# Lengths are log-normal and wide on purpose: one GPU warns for two weeks, the next for an hour.
# Memory (HBM): field studies of DRAM see correctable errors build up over weeks before an
# uncorrectable one on a failing module (Schroeder et al., "DRAM errors in the wild",
# SIGMETRICS 2009: a CE month raises the next month's CE odds 35-200x; Giurgiu et al.,
# Middleware 2017 and SYSTOR 2017: UEs predicted "weeks in advance" from daily CE logs); but
# for HBM, Wu et al. (USENIX ATC 2024, 19 data centres) found the CE *rate* a weak predictor of
# uncorrectable errors. So: a median of 4 days (was our 48 h), as wide as before (12% start
# under 24 h before the failure, 32% over a week), with faint precursors kept by the intensity
# spread. Cooling: Titan's GPU failures (a resistor corroding over years) tracked heat
# dissipation (Ostrouchov et al., SC20), a slow wear: a median of 5 days (was 72 h). PCIe and
# NVLink: no published lead time found; our 36 h / 24 h are unchanged. docs/simulator.md
# ("Precursor lengths") has the table.
PRECURSOR_SHAPE: dict[str, tuple[float, float, float]] = {
    HBM: (96.0, 1.2, 1.5),
    PCIE: (36.0, 1.1, 1.2),
    COOLING: (120.0, 0.9, 0.5),
    NVLINK: (24.0, 1.1, 1.2),
}
#: Precursor shapes: the rate over the precursor's span u in (0, 1) is the peak times
#: exp(k (u - 1)) ("accelerating", k 2.5-7, the calibrated default), exp(k (u - 1)) with k 7-12
#: ("exponential": from almost nothing), u ("linear"), 0 then the peak from a random point
#: ("step"), or hour-long blocks switched on at random ("bursts"). "mixed" draws one of the
#: five per failure.
PRECURSOR_SHAPES: tuple[str, ...] = (
    "accelerating",
    "exponential",
    "linear",
    "step",
    "bursts",
    "mixed",
)
MIN_PRECURSOR_S = 1800.0
MAX_PRECURSOR_S = 21 * 86400.0
HBM_SBE_PEAK_PER_H = 120.0  # median SBE rate (/h) just before an HBM failure
HBM_REMAP_PER_SBE = 0.002  # a row is remapped for about one SBE in 500 on a failing bank
PCIE_REPLAY_PEAK_PER_MIN = 8.0  # DCGM warns above 16 lanes x 1.92 = 31/min on Gen5
COOLING_MEM_RISE_C = 36.0  # median extra HBM temperature at failure, full load: past 95 C
NVLINK_CRC_PEAK_PER_MIN = 40.0

# --- Benign look-alikes and background -----------------------------------------------------
#: Board traits that look alarming and never fail, and each one's share of look-alike boards.
LOOKALIKE_SPLIT: dict[str, float] = {
    "sbe_stable": 0.25,  # a stable, high single-bit rate (NVIDIA: Xid 92, "ignore")
    "sbe_bursty": 0.30,  # SBE bursts that stop
    "pcie_noisy": 0.15,  # replay blips, link otherwise fine
    "hot_mem": 0.20,  # HBM persistently hotter than the core (slot airflow)
    "app_flaky": 0.10,  # user code that keeps raising application Xids
}
BASE_SBE_SHARE = 0.10  # boards with a low background SBE rate (Summit/Delta: most see none)
BASE_SBE_MEDIAN_PER_DAY = 0.5
STABLE_SBE_MEDIAN_PER_DAY = 80.0
BURST_RATE_PER_DAY = 0.15  # bursts per day on a burst-prone board
BURST_RATE_ANY_PER_DAY = 0.003  # rare bursts on any board
BURST_MEDIAN_H = 3.0
BURST_MEDIAN_PER_H = 150.0
PCIE_BLIP_PER_DAY = 0.03
PCIE_NOISY_BLIP_PER_DAY = 1.0
NVLINK_BLIP_PER_DAY = 0.05
APP_XID_NODE_PER_DAY = 0.05  # job crashes: Xid 43/13 on the node's GPUs
APP_XID_GPU_PER_DAY = 0.02  # Xid 31 (MMU fault) on one GPU
APP_FLAKY_FACTOR = 25.0
HEAT_EVENTS_PER_RACK_DAY = 0.05  # rack-wide inlet temperature excursions (CRAC trips)
XID_92_THRESHOLD_PER_H = 200.0  # the driver reports Xid 92 above a high SBE rate

# --- Xid codes (NVIDIA Xid catalogue) ------------------------------------------------------
XID_GR_EXCEPTION = 13
XID_MMU_FAULT = 31
XID_STOPPED = 43
XID_DBE = 48
XID_ROW_REMAP = 63
XID_ROW_REMAP_FAILURE = 64
XID_NVLINK = 74
XID_FELL_OFF_BUS = 79
XID_HIGH_SBE_RATE = 92
XID_CONTAINED_ECC = 94
XID_UNCONTAINED_ECC = 95
XID_GSP_RPC_TIMEOUT = 119
XID_GSP_ERROR = 120
