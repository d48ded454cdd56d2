"""How long /metrics takes to build for a large fleet, against prometheus_client.

    .venv/bin/python bench/bench_exporter.py                  # 1,024 GPUs (128 nodes x 8)
    .venv/bin/python bench/bench_exporter.py --gpus 4096 --repeat 10

Every GPU has every catalogue field (each a plausible reading, as ``bench_dcgm.py`` makes them),
and one in ten has two Xid codes. The baseline, in the same
process, is ``prometheus_client.generate_latest`` over a registry holding the same series
(labelled Gauge/Counter objects, values set beforehand, so only the scrape is timed). Prints a
table of median times in milliseconds and each one's ratio to the baseline.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from collections.abc import Callable

from bench_dcgm_parse import plausible  # bench/ is on sys.path when run as a script
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gpuwarden._exporter_render import ExporterState
from gpuwarden.readings import screen
from gpuwarden.telemetry import FIELDS, Batch, Event, GpuId, Sample

LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")


def fleet(n_gpus: int) -> Batch:
    samples, events = [], []
    for i in range(n_gpus):
        gpu = GpuId(
            hostname=f"gpu-node-{i // 8:04d}",
            index=i % 8,
            uuid=f"GPU-{i:08x}-7b3d-4e9f-a1c6-2d8b0e4f6a17",
            pci_bus_id=f"00000000:{0x18 + 0x10 * (i % 8):02X}:00.0",
            model="NVIDIA H100 80GB HBM3",
        )
        values = {f.name: plausible(f.unit, i, k) for k, f in enumerate(FIELDS)}
        samples.append(Sample(ts=1.0, gpu=gpu, values=values))
        if i % 10 == 0:
            events += [Event(1.0, gpu, "xid", 48), Event(1.0, gpu, "xid", 79)]
    return Batch(ts=1.0, samples=tuple(samples), events=tuple(events))


def baseline_registry(batch: Batch) -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics = {
        f.name: (Counter if f.kind == "counter" else Gauge)(
            f.dcgm, f.help, LABELS, registry=registry
        )
        for f in FIELDS
    }
    up = Gauge("gpuwarden_gpu_up", "GPU up", LABELS, registry=registry)
    xids = Counter("gpuwarden_xid_errors", "Xids", (*LABELS, "xid"), registry=registry)
    for s in batch.samples:
        g = s.gpu
        labels = (str(g.index), g.uuid, g.pci_bus_id, f"nvidia{g.index}", g.model, g.hostname)
        for name, value in s.values.items():
            metric = metrics[name].labels(*labels)
            metric.inc(value) if isinstance(metric, Counter) else metric.set(value)
        up.labels(*labels).set(1)
    for e in batch.events:
        g = e.gpu
        labels = (str(g.index), g.uuid, g.pci_bus_id, f"nvidia{g.index}", g.model, g.hostname)
        xids.labels(*labels, str(e.code)).inc()
    return registry


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    batch = fleet(args.gpus)
    screened = screen(batch)  # what the nvml, smi and dcgm collectors return
    state = ExporterState("bench://", has_store=False)
    state.apply(batch, 0.0, now=1.0)
    body = state.render()
    registry = baseline_registry(batch)

    baseline = median_ms(lambda: generate_latest(registry), args.repeat)
    rows = [
        ("prometheus_client generate_latest (baseline)", baseline),
        ("gpuwarden render (full rebuild)", median_ms(state.render, args.repeat)),
        (
            "gpuwarden gzip of the body (level 1)",
            median_ms(lambda: gzip.compress(body, 1), args.repeat),
        ),
        (
            "gpuwarden apply one batch (per poll)",
            median_ms(lambda: state.apply(batch, 0.0, now=1.0), args.repeat),
        ),
        (
            "gpuwarden apply a screened batch (nvml/smi/dcgm)",
            median_ms(lambda: state.apply(screened, 0.0, now=1.0), args.repeat),
        ),
    ]
    series = body.count(b"\n") - body.count(b"\n#")
    print(
        f"{args.gpus} GPUs, {series} series, body {len(body) / 1e6:.1f} MB "
        f"({len(gzip.compress(body, 1)) / 1e6:.2f} MB gzipped); median of {args.repeat}\n"
    )
    print(f"| {'step':<48} | {'ms':>8} | {'x baseline':>10} | {'speed-up':>8} |")
    print(f"|{'-' * 50}|{'-' * 10}|{'-' * 12}|{'-' * 10}|")
    for name, ms in rows:
        print(f"| {name:<48} | {ms:8.1f} | {ms / baseline:10.3f} | {baseline / ms:7.0f}x |")
    print("\n/metrics serves a cached body between polls; a full rebuild happens once per poll.")


if __name__ == "__main__":
    main()
