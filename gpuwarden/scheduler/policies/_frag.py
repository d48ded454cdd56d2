"""Per-node measures of wasted GPU capacity under a task mix, vectorised and kept current.

Both measures weigh the mix's task types t (popularity p_t; n_t GPUs of share m_t each, CPU c_t,
memory r_t) and count how much of a node's free GPU thousandths the types could not use:

``Fragmentation`` (FGD, Weng et al., ATC '23; its simulator's ``NodeGpuShareFragAmount``): all
free capacity is a fragment for a type that cannot run on the node at all (wrong model, too
little CPU, fewer than n_t GPUs with m_t free); when it can run, the fragment is the free
capacity on GPUs with less than m_t free. CPU-only types cannot use GPUs: all of it counts.

    F(n) = free(n) - sum_t p_t * fits(n, t) * (free(n) - below(n, m_t))

``StrandedCapacity`` (ours): what repeated arrivals of each type could still take, not just the
next one. The node holds k_t = min(units(n, m_t) // n_t, cpu // c_t, mem // r_t) more tasks of
type t, where units counts the m_t-sized slices its GPUs hold (sum of free // m_t), so CPU and
memory that run out before the GPUs do, and the slack a share leaves on a GPU, both count:

    S(n) = free(n) - sum_t p_t * min(free(n), k_t * n_t * m_t)

Per node we keep, for each share level m_k the mix asks for, ``at_least`` (GPUs with >= m_k
free), ``below`` (thousandths on GPUs with < m_k free) and ``units`` (m_k-slices). Placing a task
changes one GPU (a share) or some idle ones (whole GPUs), so the state after any candidate
placement is an O(K) update of its node's row and scoring C candidates costs O(C x T).
Task shapes recur (a few dozen cover 95% of the openb trace), so ``increase`` keeps, per shape,
the value after placement for every node (and GPU) asked about, and recomputes only rows of
nodes that changed since that shape last asked for them.
"""

from __future__ import annotations

import numpy as np

from gpuwarden.scheduler.cluster import MIG, ClusterState
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.policies.mix import MixArrays, TaskMix
from gpuwarden.scheduler.resources import GPU_MILLI

_SHAPES_KEPT = 128  # per-shape caches of values after placement, least recently used dropped

ShapeKey = tuple[str, int, int, int, int]


class NodeStats:
    """The mix as arrays and, per node and share level, ``at_least``, ``below`` and ``units``;
    shared by the measures of one policy so each change is counted once."""

    def __init__(self, cluster: ClusterState, mix: TaskMix) -> None:
        self.cluster = cluster
        self.mix = mix
        self.generation = 0
        self.rebuild()

    def rebuild(self) -> None:
        """Recompute everything, for a new mix."""
        c = self.cluster
        # CPU-only types can use no GPU, so all free capacity counts for them on every node:
        # the same term everywhere, left out of the sums (weights stay as the mix gives them).
        self.arrays = a = MixArrays.build([t for t in self.mix.types() if t.gpus])
        self.built_at = self.mix.observed
        self.generation += 1
        access = np.ones((c.n_nodes, len(a.weight)), dtype=bool)
        for j, models in enumerate(a.models):
            if models:
                access[:, j] = c.model_mask(models)
        self.access = access & (c.n_gpus > 0)[:, None]
        self.slice = np.maximum(a.thresholds, 1)
        k = len(a.thresholds)
        self.at_least = np.zeros((c.n_nodes, k), dtype=np.int64)
        self.below = np.zeros((c.n_nodes, k), dtype=np.int64)
        self.units = np.zeros((c.n_nodes, k), dtype=np.int64)
        self.free_sum = np.zeros(c.n_nodes, dtype=np.int64)  # thousandths counted as free
        self._seen = np.full(c.n_nodes, -1, dtype=np.int64)
        self.refresh()

    def sync_mix(self) -> None:
        """Rebuild when a learnt mix has grown enough (doubled, or 1000 more arrivals)."""
        built, now = self.built_at, self.mix.observed
        if now != built and (built <= 0 or now >= 2 * built or now - built >= 1000):
            self.rebuild()

    def refresh(self) -> None:
        """Bring the rows of nodes that changed since the last call up to date."""
        c = self.cluster
        stale = np.flatnonzero(c.version != self._seen)
        if stale.size == 0:
            return
        # MIG GPUs are fragmented by MIG slot choice, not by shares; unhealthy ones hold nothing.
        counted = c.usable_any[stale] & (c.mode[stale] != MIG)
        free = np.where(counted, c.free[stale], 0)[:, :, None]
        ge = free >= self.arrays.thresholds[None, None, :]
        self.at_least[stale] = ge.sum(axis=1)
        self.below[stale] = np.where(ge, 0, free).sum(axis=1)
        self.units[stale] = (free // self.slice[None, None, :]).sum(axis=1)
        self.free_sum[stale] = free.sum(axis=(1, 2))
        self._seen[stale] = c.version[stale]


class NodeMeasure:
    """Base: a per-node ``value`` under the mix of ``stats``; read it after ``refresh()``.
    ``with_memory``: host memory limits a type too (FGD looks at CPU only)."""

    def __init__(self, stats: NodeStats, *, with_memory: bool = False) -> None:
        self.stats = stats
        self.cluster = stats.cluster
        self.with_memory = with_memory
        self._generation = -1
        self.refresh()

    def _reset(self) -> None:
        s = self.stats
        a = s.arrays
        self._level = a.level
        self._p = a.weight
        self._type_milli = (a.gpus * a.thresholds[a.level]).astype(np.float64)
        # Reciprocals turn the per-candidate floor divisions into multiplications.
        self._inv_gpus = 1.0 / a.gpus
        self._inv_cpu = np.where(a.cpu > 0, 1.0 / np.maximum(a.cpu, 1), 0.0)
        self._inv_mem = np.where(a.mem > 0, 1.0 / np.maximum(a.mem, 1.0), 0.0)
        self.value = np.zeros(self.cluster.n_nodes)
        self._seen = np.full(self.cluster.n_nodes, -1, dtype=np.int64)
        self._after: dict[ShapeKey, tuple[np.ndarray, np.ndarray]] = {}
        self._generation = s.generation

    def refresh(self) -> None:
        """Bring the values of nodes that changed since the last call up to date."""
        s, c = self.stats, self.cluster
        s.refresh()
        if self._generation != s.generation:
            self._reset()
        stale = np.flatnonzero(c.version != self._seen)
        if stale.size == 0:
            return
        self.value[stale] = self._evaluate(
            stale,
            s.free_sum[stale],
            c.cpu_free[stale],
            c.mem_free[stale],
            s.at_least[stale],
            s.below[stale],
            s.units[stale],
        )
        self._seen[stale] = c.version[stale]

    def increase(self, job: Job, nodes: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        """How much the value of each node grows if one task of ``job`` goes to (node, gpu);
        ``gpu`` -1 for whole-GPU and CPU-only tasks. MIG tasks are not measured here."""
        self.refresh()
        c = self.cluster
        n_gpu = job.gpus_per_task if job.kind == "whole" else 0
        key: ShapeKey = (job.kind, n_gpu, job.gpu_milli, job.cpu_milli, job.memory_mib)
        entry = self._after.pop(key, None)
        if entry is None:
            shape = (c.n_nodes, c.free.shape[1]) if job.kind == "fractional" else (c.n_nodes,)
            entry = (np.zeros(shape), np.full(c.n_nodes, -1, dtype=np.int64))
        self._after[key] = entry  # most recently used last
        if len(self._after) > _SHAPES_KEPT:
            del self._after[next(iter(self._after))]
        after, seen = entry
        wanted = np.zeros(c.n_nodes, dtype=bool)
        wanted[nodes] = True
        stale = np.flatnonzero(wanted & (seen != c.version))
        if stale.size:
            if job.kind == "fractional":
                g = c.free.shape[1]
                rows = np.repeat(stale, g)
                old = c.free[stale].ravel()
                after[stale] = self.after_share(
                    rows, old, job.gpu_milli, job.cpu_milli, job.memory_mib
                ).reshape(stale.size, g)
            else:
                after[stale] = self.after_whole(stale, n_gpu, job.cpu_milli, job.memory_mib)
            seen[stale] = c.version[stale]
        mine = after[nodes, gpus] if job.kind == "fractional" else after[nodes]
        return mine - self.value[nodes]

    def after_share(
        self, nodes: np.ndarray, old: np.ndarray, milli: int, cpu: int, mem: int
    ) -> np.ndarray:
        """Value after a share of ``milli`` is taken from a GPU with ``old`` free, per node."""
        s, c = self.stats, self.cluster
        thr = s.arrays.thresholds[None, :]
        o, n = old[:, None], (old - milli)[:, None]
        return self._evaluate(
            nodes,
            s.free_sum[nodes] - milli,
            c.cpu_free[nodes] - cpu,
            c.mem_free[nodes] - mem,
            s.at_least[nodes] - (o >= thr) + (n >= thr),
            s.below[nodes] - np.where(o < thr, o, 0) + np.where(n < thr, n, 0),
            s.units[nodes] - o // s.slice + n // s.slice,
        )

    def after_whole(self, nodes: np.ndarray, gpus: int, cpu: int, mem: int) -> np.ndarray:
        """Value after ``gpus`` idle GPUs (0 for a CPU-only task) and the CPU and memory are
        taken, per node."""
        s, c = self.stats, self.cluster
        return self._evaluate(
            nodes,
            s.free_sum[nodes] - gpus * GPU_MILLI,
            c.cpu_free[nodes] - cpu,
            c.mem_free[nodes] - mem,
            s.at_least[nodes] - gpus,  # an idle GPU is at or above every level
            s.below[nodes],
            s.units[nodes] - gpus * (GPU_MILLI // s.slice)[None, :],
        )

    def _evaluate(
        self,
        nodes: np.ndarray,
        free: np.ndarray,
        cpu: np.ndarray,
        mem: np.ndarray,
        at_least: np.ndarray,
        below: np.ndarray,
        units: np.ndarray,
    ) -> np.ndarray:
        raise NotImplementedError


class Fragmentation(NodeMeasure):
    """FGD's expected fragmentation F(n), thousandths of a GPU."""

    def _evaluate(
        self,
        nodes: np.ndarray,
        free: np.ndarray,
        cpu: np.ndarray,
        mem: np.ndarray,
        at_least: np.ndarray,
        below: np.ndarray,
        units: np.ndarray,
    ) -> np.ndarray:
        a = self.stats.arrays
        if not len(a.weight):
            return free.astype(np.float64)
        fits = self.stats.access[nodes] & (cpu[:, None] >= a.cpu)
        if self.with_memory:
            fits &= mem[:, None] >= a.mem
        fits &= at_least[:, self._level] >= a.gpus
        usable = free[:, None] - below[:, self._level]
        return free - np.where(fits, usable, 0) @ self._p


class StrandedCapacity(NodeMeasure):
    """Free GPU capacity that repeated arrivals of the mix could not take, S(n)."""

    def _evaluate(
        self,
        nodes: np.ndarray,
        free: np.ndarray,
        cpu: np.ndarray,
        mem: np.ndarray,
        at_least: np.ndarray,
        below: np.ndarray,
        units: np.ndarray,
    ) -> np.ndarray:
        a = self.stats.arrays
        if not len(a.weight):
            return free.astype(np.float64)
        # floor(x / y) as floor(x * (1/y) + eps): exact for the integer sizes involved
        tasks = units[:, self._level] * self._inv_gpus
        by_cpu = np.where(a.cpu > 0, cpu[:, None] * self._inv_cpu, np.inf)
        np.minimum(tasks, by_cpu, out=tasks)
        if self.with_memory:
            by_mem = np.where(a.mem > 0, mem[:, None] * self._inv_mem, np.inf)
            np.minimum(tasks, by_mem, out=tasks)
        tasks = np.floor(tasks + 1e-9)
        np.maximum(tasks, 0, out=tasks)
        usable = np.minimum(tasks * self._type_milli, free[:, None])
        return free - np.where(self.stats.access[nodes], usable, 0.0) @ self._p
