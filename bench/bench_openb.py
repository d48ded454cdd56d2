"""GPU allocation on Alibaba's openb trace, the FGD paper's protocol (Weng et al., ATC '23).

Per seed: shuffle the pods, draw more with replacement until the GPUs requested reach 130% of the
cluster's GPUs (or drop random ones if the file asks for more), let them arrive one by one with no
departures, and record GPUs allocated / all GPUs (shares in thousandths) after each. CPU, memory
and ``gpu_spec`` (allowed GPU models) constrain placement as in the paper's simulator, which
filters on them with kube-scheduler's NodeResourcesFit and its GPU-share plugin. All policies run
in this process on the same arrival sequences; the fragmentation-aware ones get the task mix of
the pod file, as the paper's FGD does.

    .venv/bin/python bench/bench_openb.py                      # default trace, seeds 42-51
    .venv/bin/python bench/bench_openb.py --pods ../shared/data/openb/openb_pod_list_gpushare40.csv

The default trace and the node list are vendored in tests/data/openb (byte-identical, see
SOURCES.md there) and are the defaults; the other pod lists are read from ../shared/data/openb.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from gpuwarden.errors import GpuwardenError, InputError
from gpuwarden.scheduler import Arrival, Scheduler, TaskMix, openb, replay
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.resources import NodeSpec

#: Published means over seeds 42-51 at 130% arrived demand, GPU allocation % (the paper's
#: artifact, see /work/shared/data/README.md). Keyed by pod-file trace name and our policy name.
PUBLISHED: dict[str, dict[str, float]] = {
    "default": {"random": 87.47, "gpupacking": 92.00, "bestfit": 93.08, "fgd": 95.39},
    "gpushare40": {"random": 86.00, "gpupacking": 90.03, "bestfit": 91.69, "fgd": 94.15},
    "multigpu30": {"random": 89.27, "gpupacking": 94.87, "bestfit": 94.72, "fgd": 96.46},
    "gpuspec10": {"random": 87.43, "gpupacking": 92.46, "bestfit": 93.30, "fgd": 94.95},
}
POLICIES = ("warden", "fgd", "bestfit", "gpupacking", "random")
#: The vendored node list and default pod list (tests/data/openb/SOURCES.md).
VENDORED = Path(__file__).resolve().parents[1] / "tests" / "data" / "openb"


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``42,44,46`` or ``42``."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise InputError(f"--seeds must look like 42-51 or 42,43: {text!r}") from None
    if not seeds:
        raise InputError("--seeds names no seed")
    return seeds


def trace_name(pods: Path) -> str:
    return pods.stem.removeprefix("openb_pod_list_")


def run_one(args: tuple[str, int, list[NodeSpec], list[Job], float]) -> tuple[str, int, dict]:
    """One policy on one seed's arrival sequence."""
    policy, seed, nodes, jobs, ratio = args
    capacity = sum(len(n.gpus) for n in nodes) * 1000
    arrivals = [Arrival(0.0, j) for j in openb.workload(jobs, capacity, ratio, seed)]
    scheduler = Scheduler(nodes, policy, mix=TaskMix.from_jobs(jobs), seed=seed)
    # CPU time, not wall time: other work on a shared machine does not slow the count down
    result = replay(scheduler, arrivals, clock=time.process_time)
    return (
        policy,
        seed,
        {
            "at100": result.ratio_at(1.0),
            "at130": result.ratio_at(ratio),
            "rate": result.decisions_per_s,
            "placed": int(result.placed.sum()),
            "arrived": int(result.placed.size),
        },
    )


def main(argv: list[str] | None = None) -> int:
    nodes_default = VENDORED / "openb_node_list_gpu_node.csv"
    pods_default = VENDORED / "openb_pod_list_default.csv"
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=Path, default=nodes_default, help="openb node list CSV")
    ap.add_argument("--pods", type=Path, default=pods_default, help="openb pod list CSV")
    ap.add_argument("--seeds", default="42-51", help="seeds, e.g. 42-51 (default) or 42,43")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policies")
    ap.add_argument("--ratio", type=float, default=1.3, help="arrived GPU demand / capacity")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        nodes = openb.load_nodes(args.nodes)
        jobs = [p.job for p in openb.load_pods(args.pods)]
    except GpuwardenError as exc:
        print(f"bench_openb: {exc}", file=sys.stderr)
        return 2
    trace = trace_name(args.pods)
    gpus = sum(len(n.gpus) for n in nodes)
    print(f"# {trace}: {len(nodes)} nodes, {gpus} GPUs, {len(jobs)} pods; seeds {args.seeds}")
    tasks = [(p, s, nodes, jobs, args.ratio) for p in policies for s in seeds]
    started = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(run_one, tasks))
    else:
        results = [run_one(t) for t in tasks]
    wall = time.perf_counter() - started
    print(render(trace, policies, results, args.ratio, args.markdown))
    print(f"# {len(tasks)} runs in {wall:.0f} s")
    return 0


def render(trace: str, policies: list[str], results: list, ratio: float, markdown: bool) -> str:
    published = PUBLISHED.get(trace, {})
    head = [
        "policy",
        "alloc % at 100%",
        f"alloc % at {ratio:.0%}",
        "published (same policy)",
        "published FGD",
        "decisions per CPU-s",
    ]
    rows = []
    for policy in policies:
        rs = [r for p, _, r in results if p == policy]
        a100 = 100 * np.array([r["at100"] for r in rs])
        a130 = 100 * np.array([r["at130"] for r in rs])
        rate = np.median([r["rate"] for r in rs])
        pub = published.get(policy)
        rows.append(
            [
                policy,
                f"{a100.mean():.2f} ± {a100.std():.2f}",
                f"{a130.mean():.2f} ± {a130.std():.2f}",
                f"{pub:.2f}" if pub is not None else "-",
                f"{published['fgd']:.2f}" if "fgd" in published else "-",
                f"{rate:,.0f}",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r) for r in [head, *rows])


if __name__ == "__main__":
    sys.exit(main())
