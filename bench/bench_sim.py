"""How fast the simulator makes GPU-samples.

    .venv/bin/python bench/bench_sim.py                      # 90 days x 1,024 GPUs, and a small run
    .venv/bin/python bench/bench_sim.py --days 7 --nodes 16  # one custom size
    .venv/bin/python bench/bench_sim.py --frames             # also build the pandas frames

Prints one row per run: GPU-samples, seconds, GPU-samples per second, and whether the
DataFrames were built (``--frames``) or only the arrays (``frames=False``).
"""

from __future__ import annotations

import argparse
import time

from gpuwarden.sim import Fleet, FleetSpec


def measure(spec: FleetSpec, *, frames: bool, chunk_s: float, progress: bool) -> tuple[int, float]:
    t0 = time.perf_counter()
    fleet = Fleet(spec)
    n = 0
    for chunk in fleet.chunks(chunk_s=chunk_s, progress=progress, frames=frames):
        n += chunk.n_samples
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, help="nodes (default: 128 and 16, two runs)")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    ap.add_argument("--days", type=float, help="days (default: 90 and 7)")
    ap.add_argument("--step", type=int, default=60, help="seconds between samples")
    ap.add_argument("--chunk-hours", type=float, default=24.0, help="chunk length")
    ap.add_argument("--frames", action="store_true", help="also build the pandas frames")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    if args.nodes or args.days:
        sizes = [(args.nodes or 128, args.days or 90.0)]
    else:
        sizes = [(16, 7.0), (128, 90.0)]
    rows = []
    for nodes, days in sizes:
        spec = FleetSpec(
            nodes=nodes,
            gpus_per_node=args.gpus,
            days=days,
            step_s=args.step,
            seed=args.seed,
            models=("H100-80GB", "A100-80GB", "H200"),
        )
        n, secs = measure(
            spec, frames=args.frames, chunk_s=args.chunk_hours * 3600, progress=not args.no_progress
        )
        rows.append((f"{nodes * args.gpus} GPUs x {days:g} d @ {args.step} s", n, secs))
    mode = "frames" if args.frames else "arrays"
    print(f"\n{'run':<32} {'GPU-samples':>14} {'seconds':>9} {'samples/s':>12}  mode")
    for name, n, secs in rows:
        print(f"{name:<32} {n:>14,} {secs:>9.1f} {n / secs:>12,.0f}  {mode}")


if __name__ == "__main__":
    main()
