"""Alibaba's openb GPU-sharing trace (cluster-trace-gpu-v2023) as nodes and jobs.

Files: ``openb_node_list_gpu_node.csv`` (``sn,cpu_milli,memory_mib,gpu,model``) and
``openb_pod_list_*.csv`` (``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,...,
creation_time,deletion_time,...]``). ``workload`` builds the arrival sequence of the FGD paper's
protocol (Weng et al., ATC '23, and its simulator's ``TunePodsByNodeTotalResource``).
"""

from __future__ import annotations

import csv
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler.jobs import Job, PriorityClass
from gpuwarden.scheduler.resources import GPU_MILLI, NodeSpec
from gpuwarden.wording import plural

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TRACES = ("default", "gpushare40", "multigpu30", "gpuspec10")

# qos of the trace -> (priority class, interruptible): best-effort pods may be interrupted.
_QOS = {
    "LS": (PriorityClass.INFERENCE, False),
    "Guaranteed": (PriorityClass.INFERENCE, False),
    "Burstable": (PriorityClass.TRAINING, False),
    "BE": (PriorityClass.BATCH, True),
    "": (PriorityClass.BATCH, False),
}


def shared_data_dir() -> Path:
    """The shared data folder: ``$GPUWARDEN_SHARED_DATA``, else ``../shared/data`` beside the
    repository."""
    env = os.environ.get("GPUWARDEN_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def default_paths(trace: str = "default") -> tuple[Path, Path]:
    """(nodes file, pods file) of one openb trace in the shared data folder; ``InputError``
    naming the ways to give one when the folder has no openb traces (an installed package has
    no ``../shared/data`` beside it)."""
    base = shared_data_dir() / "openb"
    nodes, pods = base / "openb_node_list_gpu_node.csv", base / f"openb_pod_list_{trace}.csv"
    if not nodes.is_file() or not pods.is_file():
        raise InputError(
            f"no openb trace {trace!r} in {base.resolve()}: pass the node and pod lists "
            "(--nodes, --pods; Alibaba's clusterdata repository, cluster-trace-gpu-v2023), or "
            "set GPUWARDEN_SHARED_DATA to a folder holding openb/"
        )
    return nodes, pods


def _rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(
                    f"{path}: missing {plural(len(missing), 'column')} {', '.join(missing)}"
                )
            return list(reader)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _int(row: dict[str, str], col: str, path: Path, line: int) -> int:
    text = (row.get(col) or "").strip()
    try:
        value = int(float(text))
    except ValueError:
        raise InputError(f"{path}:{line}: {col} must be a number, got {text!r}") from None
    if value < 0:
        raise InputError(f"{path}:{line}: {col} must be >= 0, got {value}")
    return value


def load_nodes(path: str | Path) -> list[NodeSpec]:
    """Nodes of an openb node list; every GPU shareable in thousandths, as in the trace."""
    path = Path(path)
    nodes = []
    for line, row in enumerate(_rows(path, NODE_COLUMNS), start=2):
        gpus = _int(row, "gpu", path, line)
        model = (row["model"] or "").strip()
        if gpus and not model:
            raise InputError(f"{path}:{line}: a node with GPUs needs a model")
        try:
            nodes.append(
                NodeSpec.uniform(
                    row["sn"].strip(),
                    _int(row, "cpu_milli", path, line),
                    _int(row, "memory_mib", path, line),
                    gpus,
                    model if gpus else "",
                )
            )
        except InputError as exc:
            raise InputError(f"{path}:{line}: {exc}") from None
    if not nodes:
        raise InputError(f"{path}: no nodes")
    return nodes


@dataclass(frozen=True)
class Pod:
    """One trace pod: the job, and its creation/deletion times in seconds (None if absent)."""

    job: Job
    created_s: float | None = None
    deleted_s: float | None = None


def load_pods(path: str | Path) -> list[Pod]:
    """Pods of an openb pod list as one-task jobs (``gpu_spec`` -> allowed models)."""
    path = Path(path)
    pods = []
    seen: set[str] = set()
    for line, row in enumerate(_rows(path, POD_COLUMNS), start=2):
        name = row["name"].strip()
        if name in seen:
            raise InputError(f"{path}:{line}: pod {name!r} appears twice")
        seen.add(name)
        num_gpu = _int(row, "num_gpu", path, line)
        milli = _int(row, "gpu_milli", path, line) if num_gpu else GPU_MILLI
        if num_gpu > 1:
            milli = GPU_MILLI  # the trace gives multi-GPU pods whole GPUs
        priority, interruptible = _QOS.get((row.get("qos") or "").strip(), _QOS[""])
        try:
            job = Job(
                name,
                priority=priority,
                interruptible=interruptible,
                gpus_per_task=num_gpu,
                gpu_milli=milli,
                gpu_models=frozenset(m for m in (row.get("gpu_spec") or "").split("|") if m),
                cpu_milli=_int(row, "cpu_milli", path, line),
                memory_mib=_int(row, "memory_mib", path, line),
            )
        except InputError as exc:
            raise InputError(f"{path}:{line}: {exc}") from None
        pods.append(Pod(job, _time(row.get("creation_time")), _time(row.get("deletion_time"))))
    if not pods:
        raise InputError(f"{path}: no pods")
    return pods


def _time(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def workload(jobs: list[Job], capacity_milli: int, ratio: float = 1.3, seed: int = 42) -> list[Job]:
    """The paper's arrival sequence: shuffle the jobs, then, if their GPU requests fall short of
    ``ratio`` x capacity, append jobs drawn with replacement until the next would pass it (or, if
    they exceed it, drop random jobs until they do not). Appended copies get ``-tuned-N`` ids."""
    if not jobs:
        raise InputError("no jobs to build a workload from")
    if not any(j.total_gpu_milli for j in jobs):
        raise InputError("no job asks for a GPU, so GPU demand can never reach the target")
    rng = np.random.default_rng(seed)
    order = [jobs[i] for i in rng.permutation(len(jobs))]
    target = ratio * capacity_milli
    total = sum(j.total_gpu_milli for j in order)
    while total > target and order:
        total -= order.pop(int(rng.integers(len(order)))).total_gpu_milli
    n = 0
    while True:
        pick = jobs[int(rng.integers(len(jobs)))]
        if total + pick.total_gpu_milli > target:
            break
        order.append(dataclasses.replace(pick, job_id=f"{pick.job_id}-tuned-{n}"))
        total += pick.total_gpu_milli
        n += 1
    return order
