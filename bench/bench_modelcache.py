"""Model-cache-aware placement: what it costs in allocation, what it saves in cold starts.

    .venv/bin/python bench/bench_modelcache.py --seeds 42-51

1. **No fragmentation cost.** The openb protocol of bench_openb.py (its ``run_one``: pods only
   arrive until 130% of the GPUs are asked for, warden with the trace's mix), once as it is and
   once with every GPU pod naming model weights (a Zipf(1.1) draw over 50 names) and each node's
   cache holding the last 4 models placed on it (3 random ones at the start). The allocation at
   130% must stay within 0.1 points.
2. **Cold starts saved.** A simulated inference fleet (32 nodes x 8 H100): replicas arrive as a
   Poisson stream, each serving one of 40 models (Zipf 1.1) of 8, 13, 34 or 70 B parameters in
   bf16 (16, 26, 68, 140 GB; 1, 1, 2, 4 GPUs), living a lognormal 30 minutes (median). A node
   caches what it loaded on 1 TB of NVMe, least recently used first. Loading reads the weights
   at 3 GB/s from local NVMe on a hit and at 1.25 GB/s (10 GbE network storage) on a miss, after
   20 s of engine start. Same stream with and without the job naming its model.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_openb import VENDORED, parse_seeds, run_one  # noqa: E402

from gpuwarden.scheduler import Job, NodeSpec, Scheduler, TaskMix, openb  # noqa: E402

MODELS = 50


def _zipf(rng: np.random.Generator, n: int, size: int, a: float = 1.1) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** a
    return rng.choice(n, size=size, p=p / p.sum())


def openb_with_models(nodes: list[NodeSpec], jobs: list[Job], seed: int, ratio: float) -> float:
    """Allocation at ``ratio`` with model names and per-node caches (see the module doc)."""
    capacity = sum(len(n.gpus) for n in nodes) * 1000
    arrivals = openb.workload(jobs, capacity, ratio, seed)
    rng = np.random.default_rng([seed, 7])
    names = [f"model-{i}" for i in range(MODELS)]
    draw = _zipf(rng, MODELS, len(arrivals))
    s = Scheduler(nodes, "warden", mix=TaskMix.from_jobs(jobs), seed=seed)
    caches: dict[str, OrderedDict[str, None]] = {}
    for n in nodes:
        caches[n.name] = OrderedDict(
            (names[int(i)], None) for i in rng.choice(MODELS, 3, replace=False)
        )
        s.set_model_cache(n.name, caches[n.name])
    for job, m in zip(arrivals, draw, strict=True):
        named = replace(job, model=names[int(m)]) if job.gpus_per_task else job
        d = s.place(named)
        if d.placed and named.model:
            for t in d.placement.tasks:
                c = caches[t.node]
                c[named.model] = None
                c.move_to_end(named.model)
                while len(c) > 4:
                    c.popitem(last=False)
                s.set_model_cache(t.node, c)
    return s.allocation_ratio()


SIZES_GB = (16.0, 26.0, 68.0, 140.0)
GPUS = (1, 1, 2, 4)


def inference_cold_starts(seed: int, *, aware: bool, hours: float = 72.0) -> dict[str, float]:
    nodes = [NodeSpec.uniform(f"n{i:02d}", 128_000, 1_048_576, 8, "H100-80GB") for i in range(32)]
    s = Scheduler(nodes, "warden", seed=seed)
    rng = np.random.default_rng([seed, 11])
    kind = rng.integers(0, 4, 40)  # each model's size class
    mean_gpus = float(np.mean([GPUS[k] for k in kind]))
    life_s = 1800.0 * np.exp(0.5)  # mean of the lognormal (sigma 1)
    rate = 0.7 * 256 / mean_gpus / life_s  # offered load: about 70% of the GPUs
    cache: dict[str, OrderedDict[int, float]] = {n.name: OrderedDict() for n in nodes}
    heap: list[tuple[float, int, str]] = []
    t, seq, hits, misses, starts, load_s = 0.0, 0, 0, 0, [], 0.0
    models = _zipf(rng, 40, 200_000)
    end = hours * 3600
    while True:
        t += float(rng.exponential(1 / rate))
        if t > end:
            break
        while heap and heap[0][0] <= t:
            s.release(heapq.heappop(heap)[2])
        m = int(models[seq])
        k = int(kind[m])
        job = Job(f"r{seq}", priority="inference", gpus_per_task=GPUS[k],
                  model=f"m{m}" if aware else None)  # fmt: skip
        seq += 1
        d = s.place(job)
        if not d.placed:
            continue
        node = d.placement.tasks[0].node
        c = cache[node]
        hit = m in c
        hits += hit
        misses += not hit
        cold = 20.0 + SIZES_GB[k] / (3.0 if hit else 1.25)
        starts.append(cold)
        load_s += cold * GPUS[k]
        c[m] = SIZES_GB[k]
        c.move_to_end(m)
        while sum(c.values()) > 1000.0:
            c.popitem(last=False)
        s.set_model_cache(node, [f"m{x}" for x in c])
        heapq.heappush(heap, (t + float(rng.lognormal(np.log(1800.0), 1.0)), seq, job.job_id))
    a = np.array(starts)
    return {"hit": hits / max(1, hits + misses), "mean": float(a.mean()),
            "p95": float(np.percentile(a, 95)), "gpu_h": load_s / 3600, "n": float(a.size)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--ratio", type=float, default=1.3)
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    nodes = openb.load_nodes(VENDORED / "openb_node_list_gpu_node.csv")
    jobs = [p.job for p in openb.load_pods(VENDORED / "openb_pod_list_default.csv")]
    t0 = time.perf_counter()
    base, aware = [], []
    for seed in seeds:
        base.append(100 * run_one(("warden", seed, nodes, jobs, args.ratio))[2]["at130"])
        aware.append(100 * openb_with_models(nodes, jobs, seed, args.ratio))
        print(f"# seed {seed}: {base[-1]:.2f} vs {aware[-1]:.2f}", file=sys.stderr, flush=True)
    b, a = np.array(base), np.array(aware)
    print(f"openb default, warden, allocation % at {args.ratio:.0%} over seeds {args.seeds}:\n")
    print("| placement | alloc % | difference (points) |")
    print("|---|---|---|")
    print(f"| today (no model names) | {b.mean():.2f} ± {b.std():.2f} | - |")
    print(f"| model-cache aware | {a.mean():.2f} ± {a.std():.2f} | {(a - b).mean():+.3f} "
          f"(max abs {np.abs(a - b).max():.3f}) |")  # fmt: skip
    print("\nSimulated inference fleet, 32 x 8 H100, 72 h, ~70% of GPUs offered:\n")
    print("| placement | cache hit rate | mean cold start (s) | p95 cold start (s) | "
          "GPU-hours loading | replicas |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    rows = {}
    for aware_flag in (False, True):
        runs = [inference_cold_starts(seed, aware=aware_flag) for seed in seeds]
        rows[aware_flag] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        r = rows[aware_flag]
        print(f"| {'model-cache aware' if aware_flag else 'cache-blind'} | {100 * r['hit']:.1f}% | "
              f"{r['mean']:.1f} | {r['p95']:.1f} | {r['gpu_h']:.1f} | {r['n']:.0f} |")  # fmt: skip
    saved = 100 * (1 - rows[True]["mean"] / rows[False]["mean"])
    print(f"\nmean cold start {saved:.1f}% shorter; {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
