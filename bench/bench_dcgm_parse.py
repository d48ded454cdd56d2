"""How long the dcgm+http:// collector takes to turn scrapes into samples, network left out.

    .venv/bin/python bench/bench_dcgm_parse.py                # 128 endpoints x 8 GPUs
    .venv/bin/python bench/bench_dcgm_parse.py --nodes 512 --repeat 5

Each endpoint's body is dcgm-exporter 3.3+ text (HELP/TYPE lines, ``Hostname``, ``pci_bus_id``
and ``DCGM_FI_DRIVER_VERSION`` labels) with every catalogue field, the Xid gauge and two series
the collector ignores, for 8 GPUs; one GPU in 16 carries a DCGM blank sentinel and one in 32 an
out-of-range temperature, as a real fleet might. Times ``parse_text`` plus the conversion into
``Sample``s (``DcgmCollector._convert``) for every body, then the screening of impossible
readings (``readings.screen``) that ``collect()`` applies; median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpuwarden.collectors._promtext import parse_text
from gpuwarden.collectors.dcgm import DcgmCollector, _Out
from gpuwarden.readings import screen
from gpuwarden.telemetry import DCGM_XID_METRIC, FIELDS, Batch

_PLAUSIBLE = {
    "C": lambda i, k: 30 + (i * 7 + k) % 60,
    "W": lambda i, k: 100 + (i * 7 + k * 13) % 500 + 0.125,
    "%": lambda i, k: (i * 7 + k) % 101,
    "ratio": lambda i, k: ((i * 7 + k) % 100) / 100,
    "bool": lambda i, k: (i + k) % 2,
    "gen": lambda i, k: 4 + i % 2,
    "lanes": lambda i, k: 16,
    "MHz": lambda i, k: 1000 + (i * 7) % 900,
}


def plausible(f_unit: str, i: int, k: int) -> float:
    """A reading inside the field's plausible range (counters: any non-negative integer)."""
    make = _PLAUSIBLE.get(f_unit)
    return float(make(i, k) if make else (i * 7 + k * 13) % 900)


def body(node: int) -> str:
    out: list[str] = []
    extra = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_DEC_UTIL", DCGM_XID_METRIC)
    for k, name in enumerate([f.dcgm for f in FIELDS] + list(extra)):
        out.append(f"# HELP {name} {name}.\n# TYPE {name} gauge\n")
        unit = FIELDS[k].unit if k < len(FIELDS) else "%"
        for g in range(8):
            i = node * 8 + g
            labels = (
                f'gpu="{g}",UUID="GPU-{i:08x}-7b3d-4e9f-a1c6-2d8b0e4f6a17",'
                f'pci_bus_id="00000000:{0x18 + 0x10 * g:02X}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-{node:04d}",'
                'DCGM_FI_DRIVER_VERSION="550.54.15"'
            )
            value: float | int = plausible(unit, i, k)
            if name == "DCGM_FI_DEV_MEMORY_TEMP" and i % 16 == 5:
                value = 9223372036854775794  # DCGM_INT64_NOT_SUPPORTED
            if name == "DCGM_FI_DEV_GPU_TEMP" and i % 32 == 7:
                value = 255
            text = repr(value) if value != int(value) else str(int(value))
            out.append(f"{name}{{{labels}}} {text}\n")
    return "".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    bodies = [(f"gpu-node-{n:04d}", body(n)) for n in range(args.nodes)]
    collector = DcgmCollector(["http://bench.invalid:9400/metrics"])

    def run() -> int:
        out = _Out()
        for host, text in bodies:
            collector._convert(parse_text(text), host, 1.0, out)
        return len(screen(Batch(1.0, tuple(out.samples), tuple(out.events))).samples)

    n = run()
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    collector.close()
    size = sum(len(t) for _, t in bodies) / 1e6
    print(
        f"{args.nodes} endpoints, {n} GPUs, {size:.1f} MB of text: parse + convert + screen "
        f"{statistics.median(times) * 1000:.1f} ms (median of {args.repeat}, "
        f"min {min(times) * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
