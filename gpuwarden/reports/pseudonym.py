"""Pseudonyms for what should not leave the machine: hostnames, tenant names, job ids and GPU
UUIDs are replaced (``host-001``, ``tenant-01``, ``job-0001``, ``GPU-00000000-0000-0000-0000-000000000001``)
before the prompt is sent, and put back in the LLM's answer before it is checked.

Names are replaced longest first at word boundaries, so ``node1`` never rewrites part of
``node10``. A pseudonym the LLM invents (``host-999``) is not restored and the claim checker
rejects it as an unknown name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuwarden.reports.model import AtRiskGpu, Facts, FailureFact, GpuRef


class Pseudonyms:
    def __init__(self, hosts: Iterable[str] = (), tenants: Iterable[str] = (),
                 jobs: Iterable[str] = (), uuids: Iterable[str] = ()) -> None:  # fmt: skip
        self.forward: dict[str, str] = {}
        for prefix, width, names in (
            ("host-", 3, hosts),
            ("tenant-", 2, tenants),
            ("job-", 4, jobs),
        ):
            for i, name in enumerate(sorted(set(names)), 1):
                self.forward.setdefault(name, f"{prefix}{i:0{width}d}")
        for i, uuid in enumerate(sorted(set(uuids)), 1):
            self.forward.setdefault(uuid, f"GPU-00000000-0000-0000-0000-{i:012d}")
        self.back = {v: k for k, v in self.forward.items()}
        self._out = _pattern(self.forward)
        self._in = _pattern(self.back)

    @classmethod
    def of(cls, f: Facts, jobs: Iterable[str] = ()) -> Pseudonyms:
        """Every host, tenant and UUID the facts name."""
        hosts = set(f.inventory.slots)
        uuids: set[str] = set()
        refs: list[GpuRef | FailureFact | AtRiskGpu] = [*f.inventory.added, *f.inventory.missing]
        for ref in [*refs, *f.failures.items, *f.risk.gpus]:
            hosts.add(ref.hostname)
            uuids.add(ref.uuid)
        for r in f.inventory.replaced:
            hosts.add(r.hostname)
            uuids |= {r.old_uuid, r.new_uuid}
        if f.availability:
            hosts |= {n.hostname for n in f.availability.by_node}
        if f.sleep:
            hosts |= {n.hostname for n in f.sleep.by_node}
        if f.spot:  # the scheduler's node names: not always hosts the store has seen
            hosts |= set(f.spot.reclaimed_nodes)
        tenants = {t.tenant for t in f.scheduler.by_tenant} if f.scheduler else set()
        tenants |= {t.tenant for t in f.namespaces or []}
        if f.cost:
            tenants |= set(f.cost.by_tenant)
        return cls(hosts, tenants, jobs, uuids)

    def hide(self, text: str) -> str:
        return self._out.sub(lambda m: self.forward[m.group()], text) if self.forward else text

    def restore(self, text: str) -> str:
        return self._in.sub(lambda m: self.back[m.group()], text) if self.back else text


def _pattern(names: dict[str, str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-])")
