"""Check nvml:// and smi:// against a real GPU, and record what it said as fixtures.

    python tests/collectors/nvml_device_check.py --out DIR            # on a node with a GPU
    python tests/collectors/nvml_device_check.py --out DIR --fake h100_hgx_8gpu.json  # dry run

What it does, in order, writing everything under DIR and a verdict per check to check.json:

1. ``nvidia-smi -q`` (text and XML), kept for the smi_text tests.
2. Idle: nvml:// reads every GPU twice (GPM ratios need a previous sample); the node is
   recorded (record_nvml.py) into ``nvml_idle.json``; that fixture is replayed through the fake
   and the collector must give the same fields, and the same values for the ones that do not
   move (identity, memory size, ECC and remapped rows, PCIe link, power limit).
3. smi:// reads the same GPUs (its nvidia-smi output kept as ``smi_query.csv``): the fields
   both read must agree within what a second between the reads can change.
4. Loaded: a PyTorch bf16 matrix-product loop runs on every GPU; nvml:// must see the GPU
   busy, its power up and (with GPM) the graphics engine and tensor pipes active; the node is
   recorded again (``nvml_load.json``, with the energy counter's growth per 2 s as per_step).
5. The CLI: ``gpuwarden collect`` into a SQLite file, ``gpuwarden summary`` from it, and
   ``gpuwarden exporter``'s /metrics (``exporter_metrics.txt``).

Nothing here changes a GPU setting. Exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_nvml  # noqa: E402

from gpuwarden.collectors.nvml import NvmlCollector  # noqa: E402
from gpuwarden.collectors.smi import SmiCollector, run_nvidia_smi  # noqa: E402
from gpuwarden.telemetry import Batch  # noqa: E402

#: Fields that cannot change between two reads a second apart on an idle GPU.
STEADY = (
    "fb_total_mib", "power_limit_w", "pcie_link_gen", "pcie_link_gen_max", "pcie_link_width",
    "pcie_link_width_max", "ecc_sbe_volatile_total", "ecc_dbe_volatile_total",
    "ecc_sbe_aggregate_total", "ecc_dbe_aggregate_total", "remapped_rows_correctable",
    "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure",
    "pcie_replay_total",
)  # fmt: skip
#: Fields both collectors read, and how far apart two reads a second apart may be.
AGREE = {"gpu_temp_c": 3.0, "mem_temp_c": 3.0, "fb_total_mib": 0.0, "power_limit_w": 0.5,
         "pcie_link_width_max": 0.0, "pcie_link_gen_max": 0.0}  # fmt: skip

LOAD = """
import sys, time, torch
n = torch.cuda.device_count()
a = [torch.randn(8192, 8192, device=f"cuda:{i}", dtype=torch.bfloat16) for i in range(n)]
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for i in range(n):
        for _ in range(20):
            a[i] @ a[i]
    for i in range(n):
        torch.cuda.synchronize(i)
"""


class Checks:
    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    def check(self, name: str, ok: bool, detail: Any = "") -> bool:
        self.results.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}", flush=True)
        return ok


def values(batch: Batch) -> dict[int, dict[str, float]]:
    return {s.gpu.index: dict(s.values) for s in batch.samples}


def read_twice(collector: Any, gap_s: float) -> Batch:
    collector.collect()
    time.sleep(gap_s)
    return collector.collect()


def compare_replay(real: Batch, fixture: dict[str, Any], checks: Checks, label: str) -> None:
    """The fixture, replayed through the fake, must read as the real GPUs did."""
    from fake_nvml import FakeNvml

    fake = FakeNvml(fixture)
    replayed = read_twice(NvmlCollector(nvml=fake, hostname="replay"), 0.0)
    got, want = values(replayed), values(real)
    checks.check(f"{label}: replay has the same GPUs", sorted(got) == sorted(want), sorted(got))
    for index in sorted(set(got) & set(want)):
        missing, extra = (
            sorted(set(want[index]) - set(got[index])),
            sorted(set(got[index]) - set(want[index])),
        )
        checks.check(
            f"{label}: GPU {index} replay reads the same fields",
            not missing and not extra,
            {"fields": len(want[index]), "only_real": missing, "only_replay": extra},
        )
        moved = {
            name: (want[index][name], got[index][name])
            for name in STEADY
            if name in want[index] and name in got[index] and want[index][name] != got[index][name]
        }
        checks.check(f"{label}: GPU {index} steady fields equal in replay", not moved, moved)


def compare_smi(nvml: Batch, smi: Batch, checks: Checks) -> None:
    a, b = values(nvml), values(smi)
    for index in sorted(set(a) & set(b)):
        both = sorted(set(a[index]) & set(b[index]))
        off = {
            name: (a[index][name], b[index][name])
            for name in both
            if name in AGREE and abs(a[index][name] - b[index][name]) > AGREE[name]
        }
        checks.check(
            f"smi vs nvml: GPU {index} agree",
            not off,
            {"both_read": len(both), "only_nvml": sorted(set(a[index]) - set(b[index])),
             "only_smi": sorted(set(b[index]) - set(a[index])), "differ": off},
        )  # fmt: skip


def busy(nvml_module: Any) -> float:
    nvml_module.nvmlInit()
    try:
        handle = nvml_module.nvmlDeviceGetHandleByIndex(0)
        return float(nvml_module.nvmlDeviceGetUtilizationRates(handle).gpu)
    finally:
        nvml_module.nvmlShutdown()


def loaded_checks(idle: Batch, load: Batch, checks: Checks) -> None:
    before, after = values(idle), values(load)
    for index in sorted(after):
        now, then = after[index], before.get(index, {})
        checks.check(
            f"load: GPU {index} busy", now.get("gpu_util_pct", 0) >= 90, now.get("gpu_util_pct")
        )
        checks.check(
            f"load: GPU {index} power rose",
            now.get("power_w", 0) > then.get("power_w", math.inf) + 50,
            (then.get("power_w"), now.get("power_w")),
        )
        if "gr_engine_active" in then or "gr_engine_active" in now:
            checks.check(
                f"load: GPU {index} GPM engine and tensor pipes active",
                now.get("gr_engine_active", 0) > 0.5 and now.get("tensor_active", 0) > 0.1,
                (now.get("gr_engine_active"), now.get("tensor_active")),
            )


def cli(out: Path, checks: Checks, collector_url: str) -> None:
    gw = [sys.executable, "-m", "gpuwarden.cli"]
    store = f"sqlite:///{out / 'gw.db'}"
    run = subprocess.run(
        [*gw, "collect", "--collector", collector_url, "--store", store, "--interval", "1",
         "--iterations", "3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    checks.check("cli: collect nvml:// into SQLite", run.returncode == 0, run.stderr[-800:])
    run = subprocess.run(
        [*gw, "summary", "--store", store], capture_output=True, text=True, timeout=120
    )
    (out / "summary.txt").write_text(run.stdout + run.stderr)
    checks.check("cli: summary", run.returncode == 0, run.stdout[-1500:] + run.stderr[-800:])
    exporter = subprocess.Popen(
        [*gw, "exporter", "--collector", collector_url, "--listen", "127.0.0.1:9499",
         "--interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        text = ""
        for _ in range(60):
            time.sleep(0.5)
            try:
                with urllib.request.urlopen("http://127.0.0.1:9499/metrics", timeout=5) as r:
                    text = r.read().decode()
                if "DCGM_FI_DEV_GPU_TEMP" in text:
                    break
            except OSError:
                continue
        (out / "exporter_metrics.txt").write_text(text)
        checks.check(
            "cli: exporter /metrics has DCGM names", "DCGM_FI_DEV_GPU_TEMP" in text, len(text)
        )
    finally:
        exporter.terminate()
        exporter.wait(timeout=20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fake", help="dry run on this fixture (tests/data/nvml) instead of NVML")
    ap.add_argument("--load-seconds", type=float, default=25.0)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    checks = Checks()

    if args.fake:
        from fake_nvml import FakeNvml

        record_nvml.NV = module = FakeNvml(args.fake)
    else:
        import pynvml as module

        for name, argv in (("nvidia-smi-q.txt", ["-q"]), ("nvidia-smi-q.xml", ["-q", "-x"])):
            smi = subprocess.run(["nvidia-smi", *argv], capture_output=True, text=True, timeout=60)
            (out / name).write_text(smi.stdout)
            checks.check(f"nvidia-smi {' '.join(argv)}", smi.returncode == 0, smi.stderr[-300:])

    collector = NvmlCollector(nvml=module if args.fake else None, hostname="device")
    idle = read_twice(collector, 1.0)
    checks.check("idle: nvml:// read without problems", not idle.problems, list(idle.problems))
    fixture = record_nvml.record("idle", gpm_interval_s=1.0)
    (out / "nvml_idle.json").write_text(json.dumps(fixture, indent=1))
    compare_replay(idle, fixture, checks, "idle")
    (out / "nvml_idle_samples.json").write_text(
        json.dumps({s.gpu.index: dict(s.values) for s in idle.samples}, indent=1, sort_keys=True)
    )

    if not args.fake:
        raw: list[str] = []

        def tee(argv: list[str], timeout_s: float) -> Any:
            result = run_nvidia_smi(argv, timeout_s)
            raw.append(" ".join(argv) + "\n" + result.stdout)
            return result

        smi = SmiCollector(run=tee, hostname="device").collect()
        (out / "smi_query.csv").write_text("\n".join(raw))
        checks.check("smi:// read without problems", not smi.problems, list(smi.problems))
        compare_smi(idle, smi, checks)

        load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.load_seconds)])
        try:
            for _ in range(40):
                time.sleep(0.5)
                if busy(module) >= 90:
                    break
            time.sleep(2.0)
            loaded = read_twice(collector, 2.0)
            loaded_checks(idle, loaded, checks)
            (out / "nvml_load_samples.json").write_text(
                json.dumps(
                    {s.gpu.index: dict(s.values) for s in loaded.samples}, indent=1, sort_keys=True
                )
            )
            fixture = record_nvml.record("under load", gpm_interval_s=1.0, per_step_s=2.0)
            (out / "nvml_load.json").write_text(json.dumps(fixture, indent=1))
            compare_replay(loaded, fixture, checks, "load")
        finally:
            load.terminate()
            load.wait(timeout=30)
    collector.close()

    if not args.fake:
        cli(out, checks, "nvml://")
    (out / "check.json").write_text(json.dumps(checks.results, indent=1, default=str))
    failed = [r["check"] for r in checks.results if not r["ok"]]
    print(f"{len(checks.results) - len(failed)} of {len(checks.results)} checks hold", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
