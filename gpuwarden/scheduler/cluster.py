"""The cluster as numpy arrays over nodes and GPU slots, updated in place.

One row per node, one column per GPU slot (rows are padded to the largest node). Feasibility
of a task is a handful of vector operations over all nodes, and every change touches one row and
bumps that node's ``version``, so policies can keep their own per-node caches and refresh only
the rows that changed. Policies read these arrays; only ``apply``/``undo``/``set_health``/
``set_mode`` write them.

Free GPU capacity is in thousandths (``free``: 1000 = idle GPU). A MIG GPU's ``free`` is the
share of its 7 compute slices not yet carved out; ``mig_mask`` holds its used memory slices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler import compat, mig
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.resources import GPU_MILLI, Health, NodeSpec, SharingMode

_HEALTH = {h: i for i, h in enumerate(Health)}  # ok, at-risk, unhealthy: 0, 1, 2
_MODE = {m: i for i, m in enumerate(SharingMode)}  # whole, fractional, mig: 0, 1, 2
WHOLE, FRACTIONAL, MIG = 0, 1, 2


@dataclass(frozen=True)
class TaskAlloc:
    """What one placed task holds on one node (the undo record of ``apply``)."""

    node: int
    gpus: tuple[int, ...]
    milli: int  # per GPU, for whole and fractional tasks
    cpu_milli: int
    memory_mib: int
    gpu_memory_mib: tuple[float, ...]  # per GPU; NaN when the GPU's memory is unknown
    interruptible: bool
    mig: mig.MigInstance | None = None
    mig_compute: int = 0
    mig_me: bool = False
    sharing: str | None = None  # a share's "mps" or "time-slice"


class ClusterState:
    """Mutable state of every node and GPU, built from ``NodeSpec``s."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        if not nodes:
            raise InputError("the cluster has no nodes")
        self.names = [n.name for n in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(nodes):
            raise InputError("node names must be unique")
        self.specs = tuple(nodes)
        n, g = len(nodes), max(1, max(len(x.gpus) for x in nodes))
        self.models = sorted({x.gpu_model for x in nodes if x.gpu_model})
        model_of = {m: i for i, m in enumerate(self.models)}
        self.cpu_cap = np.array([x.cpu_milli for x in nodes], dtype=np.int64)
        self.mem_cap = np.array([x.memory_mib for x in nodes], dtype=np.int64)
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.model_idx = np.array([model_of.get(x.gpu_model, -1) for x in nodes], dtype=np.int64)
        self.n_gpus = np.array([len(x.gpus) for x in nodes], dtype=np.int64)
        self.exists = np.arange(g)[None, :] < self.n_gpus[:, None]
        self.free = np.where(self.exists, GPU_MILLI, 0).astype(np.int64)
        self.health = np.full((n, g), 2, dtype=np.int8)
        self.mode = np.full((n, g), FRACTIONAL, dtype=np.int8)
        self.gpu_mem_cap = np.full((n, g), np.nan)
        for i, x in enumerate(nodes):
            for gs in x.gpus:
                self.health[i, gs.index] = _HEALTH[gs.health]
                self.mode[i, gs.index] = _MODE[gs.mode]
                if gs.memory_mib is not None:
                    self.gpu_mem_cap[i, gs.index] = gs.memory_mib
        self.gpu_mem_free = self.gpu_mem_cap.copy()
        self.mig_mask = np.zeros((n, g), dtype=np.int64)
        self.mig_compute = np.zeros((n, g), dtype=np.int64)
        self.mig_me = np.zeros((n, g), dtype=bool)
        self.nonint = np.zeros((n, g), dtype=np.int64)  # non-interruptible tasks per GPU
        self.mps_on = np.zeros((n, g), dtype=np.int64)  # MPS shares per GPU
        self.sliced_on = np.zeros((n, g), dtype=np.int64)  # time-sliced shares per GPU
        self._env_ok: dict[tuple[object, ...], np.ndarray] = {}
        self.tasks_on = np.zeros((n, g), dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.capacity_milli = int(self.n_gpus.sum()) * GPU_MILLI
        self.allocated_milli = 0
        self._model_masks: dict[frozenset[str], np.ndarray] = {}
        self._mig_tables: dict[str, np.ndarray] = {}
        self._mig_count_tables: dict[str, np.ndarray] = {}
        self._room_table: np.ndarray | None = None
        # Per-node aggregates, kept current row by row in _refresh.
        self.usable_ok = np.zeros((n, g), dtype=bool)
        self.usable_any = np.zeros((n, g), dtype=bool)
        self.full_ok = np.zeros(n, dtype=np.int64)  # idle GPUs a whole-GPU task may take
        self.full_any = np.zeros(n, dtype=np.int64)
        self.frac_max_ok = np.zeros(n, dtype=np.int64)  # largest share free on a shared GPU
        self.frac_max_any = np.zeros(n, dtype=np.int64)
        self.free_total = np.zeros(n, dtype=np.int64)  # schedulable free thousandths
        for i in range(n):
            self._refresh(i)

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    def allocation_ratio(self) -> float:
        """GPUs allocated / all GPUs, shares counted in thousandths (the openb metric)."""
        return self.allocated_milli / self.capacity_milli if self.capacity_milli else math.nan

    # ---- feasibility -----------------------------------------------------------------------

    def model_mask(self, models: frozenset[str]) -> np.ndarray:
        """Nodes whose GPU model is in ``models`` (every node when ``models`` is empty)."""
        mask = self._model_masks.get(models)
        if mask is None:
            if models:
                ids = [i for i, m in enumerate(self.models) if m in models]
                mask = np.isin(self.model_idx, ids)
            else:
                mask = np.ones(self.n_nodes, dtype=bool)
            mask.flags.writeable = False
            self._model_masks[models] = mask
        return mask

    def env_mask(self, job: Job) -> np.ndarray:
        """Nodes whose driver, CUDA and GPUs can run ``job``'s software (``compat.py``); every
        node for a job that states no need."""
        needs = job.needs
        mask = self._env_ok.get(needs)
        if mask is None:
            mask = np.array([self.env_reason(job, i) is None for i in range(self.n_nodes)])
            mask.flags.writeable = False
            self._env_ok[needs] = mask
        return mask

    def env_reason(self, job: Job, node: int) -> str | None:
        """Why ``job``'s software cannot run on ``node``, or None when it can."""
        if job.needs == (None, None, frozenset(), False):
            return None
        spec = self.specs[node]
        return compat.why_not_runs(
            min_cuda=job.min_cuda, min_driver=job.min_driver, gpu_arch=job.gpu_arch,
            ptx_jit=job.ptx_jit, model=spec.gpu_model, driver=spec.driver_version,
            cuda=spec.cuda_version, cuda_compat=spec.cuda_compat,
        )  # fmt: skip

    def any_at_risk(self) -> bool:
        """Whether any GPU is at-risk (interruptible work then goes there last)."""
        return bool((self.health == _HEALTH[Health.AT_RISK]).any())

    def usable(self, interruptible: bool) -> np.ndarray:
        """GPUs this job may use by health: at-risk ones only for interruptible work."""
        return self.usable_any if interruptible else self.usable_ok

    def mig_fit(self, profile: str, node: int | None = None) -> np.ndarray:
        """Per GPU, where ``profile`` would go given its occupancy: ``[..., 0]`` the start
        (-1 where it does not fit), ``[..., 1]`` the compute slices that start wastes. For one
        node's row when ``node`` is given."""
        table = self._mig_tables.get(profile)
        if table is None:
            table = np.full((len(self.models) + 1, 256, 2), -1, dtype=np.int64)
            for i, m in enumerate(self.models):
                if mig.mig_capable(m) and profile in {p.name for p in mig.MIG_PROFILES[m]}:
                    table[i] = mig.placement_table(m, profile).T
            self._mig_tables[profile] = table
        rows = slice(None) if node is None else node
        model = self.model_idx[rows]
        model = model[:, None] if node is None else model
        fit = table[model, self.mig_mask[rows]]  # a GPU-less node (model -1) reads the last row
        blocked = ~((self.mode[rows] == MIG) & self.exists[rows])
        if profile.endswith("+me"):
            blocked |= self.mig_me[rows]
        fit[..., 0] = np.where(blocked, -1, fit[..., 0])
        return fit

    def mig_room(self, node: int | None = None) -> np.ndarray:
        """Compute slices still placeable per GPU (0 on GPUs that cannot do MIG)."""
        if self._room_table is None:
            self._room_table = np.zeros((len(self.models) + 1, 256), dtype=np.int64)
            for i, m in enumerate(self.models):
                if mig.mig_capable(m):
                    self._room_table[i] = mig.capacity_table(m)
        rows = slice(None) if node is None else node
        model = self.model_idx[rows]
        model = model[:, None] if node is None else model
        return self._room_table[model, self.mig_mask[rows]]

    def feasible(self, job: Job, memory_room: float = math.inf) -> np.ndarray:
        """Nodes where one task of ``job`` fits now, honouring health, GPU model, CPU, memory,
        sharing mode and, when ``memory_room`` is finite, the tenant's GPU-memory quota."""
        ok = (self.cpu_free >= job.cpu_milli) & (self.mem_free >= job.memory_mib)
        kind = job.kind
        if kind == "cpu":
            return ok
        ok &= self.model_mask(job.gpu_models) & self.env_mask(job)
        if kind == "whole" and job.gpu_memory_mib is None:
            ok &= (self.full_any if job.interruptible else self.full_ok) >= job.gpus_per_task
        elif kind == "fractional" and job.gpu_memory_mib is None and job.sharing == "any":
            ok &= (self.frac_max_any if job.interruptible else self.frac_max_ok) >= job.gpu_milli
        else:
            ok &= self.gpu_candidates(job).sum(axis=1) >= job.gpus_per_task
        if memory_room != math.inf:
            ok &= self.memory_charge(job) <= memory_room  # NaN (unknown memory) is False
        return ok

    def fit_counts(self, job: Job) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """How many more tasks of ``job`` each node takes now by its free CPU, by its free memory
        and by its GPUs (model, health, sharing mode, share, GPU memory, MIG slices), each on its
        own and at most ``job.tasks``: a few vector operations, whatever the number of tasks.

        Each count is exact: the tasks of a gang are alike, so one placed on a node lowers each
        of that node's counts by exactly one, whichever of its GPUs it gets (a share takes one
        share of one GPU; a MIG profile's starts never overlap). The smallest of the three,
        summed over nodes, is how many tasks fit at once, in any order of choices."""
        cap = job.tasks
        full = np.full(self.n_nodes, cap, dtype=np.int64)
        cpu = np.minimum(self.cpu_free // job.cpu_milli, cap) if job.cpu_milli else full
        mem = np.minimum(self.mem_free // job.memory_mib, cap) if job.memory_mib else full
        if job.kind == "cpu":
            return cpu, mem, full
        cand = self.gpu_candidates(job)
        if job.kind == "whole":
            gpu = cand.sum(axis=1) // job.gpus_per_task
        elif job.kind == "fractional":
            each = self.free // job.gpu_milli
            if job.gpu_memory_mib is not None:  # unknown memory (NaN) is no candidate anyway
                mem_free = np.nan_to_num(self.gpu_mem_free, nan=0.0, posinf=0.0)
                each = np.minimum(each, (mem_free // job.gpu_memory_mib).astype(np.int64))
            gpu = np.where(cand, each, 0).sum(axis=1)
        else:
            assert job.mig_profile is not None
            gpu = np.where(cand, self._mig_counts(job.mig_profile), 0).sum(axis=1)
        usable = self.model_mask(job.gpu_models) & self.env_mask(job)
        gpu = np.where(usable, np.minimum(gpu, cap), 0)
        return cpu, mem, gpu

    def _mig_counts(self, profile: str) -> np.ndarray:
        """Per GPU, how many more ``profile`` instances fit (``mig.count_table``)."""
        table = self._mig_count_tables.get(profile)
        if table is None:
            table = np.zeros((len(self.models) + 1, 1 << mig.MEMORY_SLICES), dtype=np.int64)
            for i, m in enumerate(self.models):
                if mig.mig_capable(m) and profile in {p.name for p in mig.MIG_PROFILES[m]}:
                    table[i] = mig.count_table(m, profile)
            self._mig_count_tables[profile] = table
        return table[self.model_idx[:, None], self.mig_mask]

    def gpu_candidates(self, job: Job, node: int | None = None) -> np.ndarray:
        """GPUs one task of ``job`` could use (nodes x slots, or one node's slots), before the
        CPU, memory and model checks of ``feasible``."""
        rows = slice(None) if node is None else node
        usable = self.usable(job.interruptible)[rows]
        need = job.gpu_memory_mib
        if job.kind == "mig":
            assert job.mig_profile is not None
            cand = usable & (self.mig_fit(job.mig_profile, node)[..., 0] >= 0)
            if need is not None:
                mem = self._mig_memory(job)[rows]
                cand &= (mem[:, None] if node is None else mem) >= need
            return cand
        if job.kind == "whole":
            cand = usable & (self.free[rows] == GPU_MILLI) & (self.mode[rows] != MIG)
            if need is not None:
                cand &= self.gpu_mem_cap[rows] >= need
            return cand
        cand = usable & (self.free[rows] >= job.gpu_milli) & (self.mode[rows] == FRACTIONAL)
        if need is not None:
            cand &= self.gpu_mem_free[rows] >= need
        if job.sharing == "mps":  # never beside time-sliced shares, nor they beside MPS ones
            cand &= self.sliced_on[rows] == 0
        elif job.sharing == "time-slice":
            cand &= self.mps_on[rows] == 0
        return cand

    def memory_charge(self, job: Job) -> np.ndarray:
        """GPU memory (MiB) one task of ``job`` would be charged on each node; NaN if unknown.

        A declared ``gpu_memory_mib`` is charged as declared; otherwise a whole GPU charges its
        framebuffer and a share charges that share of it.
        """
        per_gpu = self.gpu_mem_cap[:, 0]
        if job.kind == "cpu":
            return np.zeros(self.n_nodes)
        if job.kind == "mig":
            return self._mig_memory(job)
        if job.gpu_memory_mib is not None:
            each = np.full(self.n_nodes, float(job.gpu_memory_mib))
        else:
            each = per_gpu * (job.gpu_milli / GPU_MILLI)
        return each * job.gpus_per_task

    def _mig_memory(self, job: Job) -> np.ndarray:
        assert job.mig_profile is not None
        out = np.full(self.n_nodes, np.nan)
        for i, m in enumerate(self.models):
            if mig.mig_capable(m):
                for p in mig.MIG_PROFILES[m]:
                    if p.name == job.mig_profile:
                        out[self.model_idx == i] = p.memory_mib
        return out

    # ---- choosing GPUs within a node ---------------------------------------------------------

    def default_gpus(self, job: Job, node: int) -> tuple[tuple[int, ...], int | None]:
        """GPUs for one task on ``node``: the lowest-numbered idle GPUs for whole-GPU tasks,
        the fullest GPU that still fits (best fit) for a share, and for MIG the start that
        spoils the least of a GPU, preferring GPUs already partitioned. Returns (gpus, start)."""
        if job.kind == "cpu":
            return (), None
        cand = self.gpu_candidates(job, node)
        idx = np.flatnonzero(cand)
        if job.kind == "whole":
            return tuple(int(i) for i in idx[: job.gpus_per_task]), None
        if job.kind == "fractional":
            best = idx[np.argmin(self.free[node, idx])]
            return (int(best),), None
        assert job.mig_profile is not None
        fit = self.mig_fit(job.mig_profile, node)[idx]
        room = self.mig_room(node)[idx]
        # least waste first, then the GPU with the least room left (keep empty GPUs whole)
        best = np.lexsort((idx, room, fit[:, 1]))[0]
        return (int(idx[best]),), int(fit[best, 0])

    # ---- changing state -----------------------------------------------------------------------

    def apply(
        self,
        job: Job,
        node: int,
        gpus: tuple[int, ...],
        start: int | None,
        sharing: str | None = None,
    ) -> TaskAlloc:
        """Give one task of ``job`` the ``gpus`` on ``node``; refuses anything that would
        over-commit a GPU or land on a GPU the job may not use. A share is MPS or time-sliced
        as ``sharing`` says (an adopted placement), else as the job asks, else as the GPU's
        other shares are (time-sliced on an idle GPU)."""
        cand = self.gpu_candidates(job, node) if gpus else None
        if cand is not None and not all(cand[g] for g in gpus):
            raise InputError(f"job {job.job_id}: GPUs {gpus} of {self.names[node]} cannot take it")
        if len(gpus) != (job.gpus_per_task if job.kind != "cpu" else 0):
            raise InputError(f"job {job.job_id}: needs {job.gpus_per_task} GPUs, got {gpus}")
        if self.cpu_free[node] < job.cpu_milli or self.mem_free[node] < job.memory_mib:
            raise InputError(f"job {job.job_id}: {self.names[node]} lacks CPU or memory")
        inst, compute, me, charges, flavour = None, 0, False, [], None
        if job.kind == "fractional":
            g0 = gpus[0]
            flavour = sharing or (job.sharing if job.sharing != "any" else None)
            if flavour is None:
                flavour = "mps" if self.mps_on[node, g0] else "time-slice"
            if (self.sliced_on if flavour == "mps" else self.mps_on)[node, g0]:
                raise InputError(
                    f"job {job.job_id}: GPU {g0} of {self.names[node]} runs other shares than "
                    f"{flavour}"
                )
        if job.kind == "mig":
            assert job.mig_profile is not None and start is not None
            model = self.models[self.model_idx[node]]
            p = mig.profile(model, job.mig_profile)
            g = gpus[0]
            if start not in mig.legal_starts(model, p.name, int(self.mig_mask[node, g])):
                raise InputError(f"{p.name} does not fit at slice {start} of GPU {g}")
            inst = mig.MigInstance(p.name, start, p.memory_slices)
            compute, me = p.compute_slices, p.name.endswith("+me")
            charges = [float(p.memory_mib)]
        else:
            for g in gpus:
                cap = self.gpu_mem_cap[node, g]
                share = cap * job.gpu_milli / GPU_MILLI
                charges.append(float(job.gpu_memory_mib or share))
        alloc = TaskAlloc(
            node, tuple(gpus), job.gpu_milli if job.kind != "mig" else 0, job.cpu_milli,
            job.memory_mib, tuple(charges), job.interruptible, inst, compute, me, flavour,
        )  # fmt: skip
        self._change(alloc, +1)
        return alloc

    def undo(self, alloc: TaskAlloc) -> None:
        """Give back what ``apply`` took (a finished task, or a gang that did not fit)."""
        self._change(alloc, -1)

    def redo(self, alloc: TaskAlloc) -> None:
        """Take again exactly what ``undo`` gave back (a preemption trial that removed a job),
        without ``apply``'s checks: they hold for the order the tasks came in, not for any."""
        self._change(alloc, +1)

    def _change(self, a: TaskAlloc, sign: int) -> None:
        n = a.node
        self.cpu_free[n] -= sign * a.cpu_milli
        self.mem_free[n] -= sign * a.memory_mib
        before = int(self.free[n].sum())
        for g, mem in zip(a.gpus, a.gpu_memory_mib, strict=True):
            if a.mig is not None:
                self.mig_mask[n, g] ^= a.mig.mask
                self.mig_compute[n, g] += sign * a.mig_compute
                if a.mig_me:
                    self.mig_me[n, g] = sign > 0
                used = round(GPU_MILLI * self.mig_compute[n, g] / mig.COMPUTE_SLICES)
                self.free[n, g] = GPU_MILLI - used
            else:
                self.free[n, g] -= sign * a.milli
            self.gpu_mem_free[n, g] -= sign * mem
            self.tasks_on[n, g] += sign
            if a.sharing == "mps":
                self.mps_on[n, g] += sign
            elif a.sharing == "time-slice":
                self.sliced_on[n, g] += sign
            if not a.interruptible:
                self.nonint[n, g] += sign
            if self.free[n, g] < 0 or self.free[n, g] > GPU_MILLI:
                raise RuntimeError(f"GPU {g} of {self.names[n]} over-committed")
        self.allocated_milli += before - int(self.free[n].sum())
        self._refresh(n)

    def set_health(self, node: int, gpu: int, health: Health) -> None:
        self.health[node, gpu] = _HEALTH[Health(health)]
        self._refresh(node)

    def set_mode(self, node: int, gpu: int, mode: SharingMode) -> None:
        """Switch an idle GPU between whole, fractional and MIG (``nvidia-smi -mig 0|1``)."""
        if self.tasks_on[node, gpu]:
            raise InputError(f"GPU {gpu} of {self.names[node]} is in use; drain it first")
        if mode is SharingMode.MIG and not mig.mig_capable(self.specs[node].gpu_model):
            raise InputError(f"{self.specs[node].gpu_model} does not support MIG")
        self.mode[node, gpu] = _MODE[SharingMode(mode)]
        self._refresh(node)

    def _refresh(self, n: int) -> None:
        ex, h, m, f = self.exists[n], self.health[n], self.mode[n], self.free[n]
        self.usable_ok[n] = ex & (h == 0)
        self.usable_any[n] = ex & (h <= 1)
        idle = (f == GPU_MILLI) & (m != MIG)
        self.full_ok[n] = int((idle & self.usable_ok[n]).sum())
        self.full_any[n] = int((idle & self.usable_any[n]).sum())
        shared = m == FRACTIONAL
        self.frac_max_ok[n] = int(np.where(shared & self.usable_ok[n], f, 0).max())
        self.frac_max_any[n] = int(np.where(shared & self.usable_any[n], f, 0).max())
        self.free_total[n] = int(np.where(self.usable_any[n], f, 0).sum())
        self.version[n] += 1
