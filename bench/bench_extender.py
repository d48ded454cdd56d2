"""Scheduler-extender decisions per second on a cluster the size of openb's (1,213 nodes).

One decision is what kube-scheduler asks of an extender for one pod: ``filter`` on every node,
then ``prioritize`` on the nodes kept. The cluster is openb's node list (vendored in
tests/data/openb) as Kubernetes Node objects, 60% of its GPUs already held by pods of the
default openb trace (placed by warden), 1% of its GPUs at risk; the pods asked about are the
trace's next arrivals, as Pod objects.

    in process        Extender.filter + Extender.prioritize called directly (the baseline)
    HTTP, node names  POSTs to a server in another process, nodeCacheCapable: true
    HTTP, NodeList    the same with every Node object in each request (nodeCacheCapable: false)

    .venv/bin/python bench/bench_extender.py                 # 2,000 decisions per mode
    .venv/bin/python bench/bench_extender.py --pods 500 --no-progress

The server is uvicorn in its own process and the client sends one request at a time over one
keep-alive connection, as kube-scheduler's extender client does (it waits for each answer), so
the two use the machine's two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from gpuwarden.scheduler import TaskMix, openb
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.policies import WardenPolicy
from gpuwarden.scheduler.resources import GPU_MILLI, NodeSpec
from gpuwarden.scheduler_hooks._k8s_view import ClusterView
from gpuwarden.scheduler_hooks.k8s_extender import Extender

VENDORED = Path(__file__).resolve().parents[1] / "tests" / "data" / "openb"


def node_object(spec: NodeSpec, at_risk: list[int]) -> dict[str, Any]:
    notes = {}
    if at_risk:
        notes["gpuwarden.io/at-risk-gpus"] = json.dumps([{"index": i} for i in at_risk])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": {
                "kubernetes.io/hostname": spec.name,
                "nvidia.com/gpu.product": spec.gpu_model,
            },
            "annotations": notes,
        },
        "status": {
            "allocatable": {
                "cpu": f"{spec.cpu_milli}m",
                "memory": f"{spec.memory_mib}Mi",
                "nvidia.com/gpu": str(len(spec.gpus)),
            }
        },
    }


def pod_object(job: Job) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(job.gpus_per_task)} if job.gpus_per_task else {}
    notes = {}
    if job.gpus_per_task == 1 and job.gpu_milli < GPU_MILLI:
        notes["gpuwarden.io/gpu-milli"] = str(job.gpu_milli)
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {"cpu": f"{job.cpu_milli}m", "memory": f"{job.memory_mib}Mi"},
                    "limits": limits,
                },
            }
        ]
    }
    if job.interruptible:
        spec["tolerations"] = [{"key": "gpuwarden.io/at-risk", "operator": "Exists"}]
    meta = {"name": job.job_id, "namespace": "bench", "annotations": notes}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def build(
    seed: int, fill: float, risk: float, cache: bool = True
) -> tuple[Extender, list[dict], list[dict]]:
    """The extender with its picture, every Node object, and the pods to ask about."""
    nodes = openb.load_nodes(VENDORED / "openb_node_list_gpu_node.csv")
    jobs = [p.job for p in openb.load_pods(VENDORED / "openb_pod_list_default.csv")]
    # any GPU model: the bench's pods carry no node affinity
    jobs = [Job(j.job_id, interruptible=j.interruptible, gpus_per_task=j.gpus_per_task,
                gpu_milli=j.gpu_milli, cpu_milli=j.cpu_milli, memory_mib=j.memory_mib)
            for j in jobs]  # fmt: skip
    rng = np.random.default_rng(seed)
    objs = []
    for spec in nodes:
        risky = [i for i in range(len(spec.gpus)) if rng.random() < risk]
        objs.append(node_object(spec, risky))
    view = ClusterView(objs)
    c = view.cluster
    mix = TaskMix.from_jobs(jobs)
    filler = WardenPolicy(mix, seed=seed)
    arrivals = openb.workload(jobs, c.capacity_milli, 1.3, seed)
    k = 0
    while k < len(arrivals) and c.allocation_ratio() < fill:
        job = arrivals[k]
        k += 1
        ok = c.feasible(job)
        if ok.any():
            ch = filler.choose(c, job, ok)
            c.apply(job, ch.node, ch.gpus, ch.mig_start)
    ext = Extender(view, policy=WardenPolicy(mix, seed=seed), cache=cache)
    return ext, objs, [pod_object(j) for j in arrivals[k:]]


def run_in_process(ext: Extender, names: list[str], pods: list[dict], bar: bool) -> float:
    t0 = time.perf_counter()
    for p in tqdm(pods, desc="in process", leave=False, disable=not bar):
        kept = json.loads(ext.filter_json({"Pod": p, "NodeNames": names}))["NodeNames"]
        ext.prioritize_json({"Pod": p, "NodeNames": kept})
    return time.perf_counter() - t0


def server_cpu(proc: subprocess.Popen) -> float:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("cpu\n")
    proc.stdin.flush()
    user, system = map(float, proc.stdout.readline().split())
    return user + system


def run_http(url: str, names: list[str], objs: list[dict], pods: list[dict], *, node_list: bool,
             bar: bool) -> float:  # fmt: skip
    """One request at a time over one keep-alive connection (``http.client``: a client about
    as light as kube-scheduler's, whose Go encoding is not the extender's cost). The filter
    bodies are encoded before the clock starts; the prioritize bodies need the filter's answer."""
    import http.client
    from urllib.parse import urlsplit

    by_name = dict(zip(names, objs, strict=True))
    if node_list:
        bodies = [
            json.dumps({"Pod": p, "Nodes": {"kind": "NodeList", "items": objs}}) for p in pods
        ]
    else:
        bodies = [json.dumps({"Pod": p, "NodeNames": names}) for p in pods]
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    headers = {"Content-Type": "application/json"}

    def post(path: str, body: str | bytes) -> bytes:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: {resp.status} {data[:200]!r}")
        return data

    t0 = time.perf_counter()
    desc = "HTTP, NodeList" if node_list else "HTTP, node names"
    for p, body in tqdm(list(zip(pods, bodies, strict=True)), desc=desc, leave=False,
                        disable=not bar):  # fmt: skip
        got = json.loads(post("/filter", body))
        if node_list:
            items = [by_name[n["metadata"]["name"]] for n in got["Nodes"]["items"]]
            args = {"Pod": p, "Nodes": {"kind": "NodeList", "items": items}}
        else:
            args = {"Pod": p, "NodeNames": got["NodeNames"]}
        json.loads(post("/prioritize", json.dumps(args)))
    wall = time.perf_counter() - t0
    conn.close()
    return wall


def serve(args: argparse.Namespace) -> None:
    """The server process: the same picture, served until stdin closes."""
    from gpuwarden.lifecycle import AppServer
    from gpuwarden.scheduler_hooks.k8s_extender import make_app

    ext, _, _ = build(args.seed, args.fill, args.risk, not args.no_cache)

    class Idle:
        def start(self) -> None: ...

        def stop(self) -> None: ...

    server = AppServer(make_app(ext), Idle()).start("127.0.0.1", 0, loop=False)
    print(server.url, flush=True)
    import resource

    for _ in sys.stdin:  # each line asks for this process's CPU seconds (all threads)
        use = resource.getrusage(resource.RUSAGE_SELF)
        print(use.ru_utime, use.ru_stime, flush=True)
    server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=2000, help="decisions per mode (default 2000)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--fill", type=float, default=0.6, help="share of GPUs already held")
    ap.add_argument("--risk", type=float, default=0.01, help="share of GPUs at risk")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--no-cache", action="store_true", help="rank every pod afresh (no answers kept per shape)"
    )
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args)
        return 0
    bar = not args.no_progress
    ext, objs, pods = build(args.seed, args.fill, args.risk, not args.no_cache)
    pods = pods[: args.pods]
    names = [o["metadata"]["name"] for o in objs]
    c = ext.view.cluster if ext.view is not None else None
    assert c is not None
    print(f"{c.n_nodes} nodes, {int(c.n_gpus.sum())} GPUs, {c.allocation_ratio():.0%} allocated, "
          f"{int((c.health == 1).sum())} GPUs at risk; {len(pods)} decisions per mode")  # fmt: skip
    kept = [len(ext.filter({"Pod": p, "NodeNames": names})["NodeNames"]) for p in pods[:200]]
    print(f"filter keeps {np.mean(kept):.0f} of {len(names)} nodes on average (first 200 pods)")
    cpu0 = time.process_time()
    inproc = run_in_process(ext, names, pods, bar)
    rows = [("in process", len(pods), inproc, time.process_time() - cpu0, 0.0)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, __file__, "--serve", "--seed", str(args.seed),
           "--fill", str(args.fill), "--risk", str(args.risk)]  # fmt: skip
    cmd += ["--no-cache"] if args.no_cache else []
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    # kube-scheduler stops filtering once it has found percentageOfNodesToScore of the nodes
    # (adaptive: 50% - nodes/125, so 40% of 1,213) and hands extenders only those
    share = max(100, len(names) * (50 - len(names) // 125) // 100)
    modes = [
        ("HTTP, node names (nodeCacheCapable)", names, len(pods), False),
        (
            f"HTTP, node names, kube-scheduler's default {share} nodes",
            names[:share],
            len(pods),
            False,
        ),
        ("HTTP, whole NodeList", names, max(1, len(pods) // 10), True),
    ]
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        for mode, some, n, node_list in modes:
            some_objs = objs[: len(some)]
            c0, s0 = time.process_time(), server_cpu(proc)
            wall = run_http(url, some, some_objs, pods[:n], node_list=node_list, bar=bar)
            rows.append((mode, n, wall, time.process_time() - c0, server_cpu(proc) - s0))
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)
    base = len(pods) / (rows[0][3] + rows[0][4])
    print(
        "\n| mode | decisions | wall s | decisions/s (wall) | client CPU ms | server CPU ms "
        "| decisions per CPU-s | vs in process |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for mode, n, wall, c_cpu, s_cpu in rows:
        per_cpu = n / (c_cpu + s_cpu)
        print(
            f"| {mode} | {n:,} | {wall:.2f} | {n / wall:,.0f} | {1000 * c_cpu / n:.2f} "
            f"| {1000 * s_cpu / n:.2f} | {per_cpu:,.0f} | {per_cpu / base:.2f}x |"
        )
    shapes = len({json.dumps(p["spec"]) + json.dumps(p["metadata"]["annotations"]) for p in pods})
    print(f"\n{shapes} distinct pod shapes among {len(pods)} pods; answers kept per shape: "
          f"{'no' if args.no_cache else 'yes'}")  # fmt: skip
    print(
        "CPU ms are per decision (filter + prioritize); decisions per CPU-s count client and "
        "server together: what one request at a time reaches when each has a core of its own."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
