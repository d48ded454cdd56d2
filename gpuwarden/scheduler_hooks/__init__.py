"""Scheduler hooks: make schedulers see GPU health, one ``Tagger`` per backend.

    open_tagger("slurm://?feature=gpuwarden_healthy")      scontrol on this host
    open_tagger("slurm://?conf=/etc/slurm/slurm.conf")    a specific cluster
    open_tagger("k8s://")                                 in-cluster or ~/.kube/config
    open_tagger("k8s://?kubeconfig=/path&context=prod")
    open_tagger("bundled+http://sched:8477")             gpuwarden scheduler serve, admin token

A bundled scheduler in the same process needs no URL: build its tagger from the scheduler
object (``BundledTagger(SchedulerTarget(scheduler))``). Wrap any tagger in
``CircuitBreaker`` so no backend re-tags more than a share of the fleet at once (``gpuwarden
serve`` does). Third-party backends register a ``gpuwarden.taggers`` entry point naming a
callable ``(url: str, *, dry_run: bool) -> Tagger``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import urlsplit

from gpuwarden.errors import UnknownSchemeError
from gpuwarden.scheduler_hooks.base import NodeHealth, Tagger, TagResult
from gpuwarden.scheduler_hooks.breaker import CircuitBreaker

BUILTIN: dict[str, str] = {
    "slurm": "gpuwarden.scheduler_hooks.slurm:SlurmTagger.from_url",
    "k8s": "gpuwarden.scheduler_hooks.k8s:KubernetesTagger.from_url",
    "kubernetes": "gpuwarden.scheduler_hooks.k8s:KubernetesTagger.from_url",
    "bundled+http": "gpuwarden.scheduler_hooks.bundled:BundledTagger.from_url",
    "bundled+https": "gpuwarden.scheduler_hooks.bundled:BundledTagger.from_url",
}


def open_tagger(url: str, *, dry_run: bool = False) -> Tagger:
    """The tagger for ``url``; raises ``UnknownSchemeError`` for an unknown scheme."""
    scheme = urlsplit(url).scheme
    factory: Any
    if scheme in BUILTIN:
        module_name, _, attr = BUILTIN[scheme].partition(":")
        factory = importlib.import_module(module_name)
        for part in attr.split("."):
            factory = getattr(factory, part)
        return factory(url, dry_run=dry_run)
    for ep in entry_points(group="gpuwarden.taggers"):
        if ep.name == scheme:
            return ep.load()(url, dry_run=dry_run)
    known = ", ".join(sorted(BUILTIN))
    raise UnknownSchemeError(f"no scheduler hook for {url!r}: scheme must be one of {known}")


__all__ = ["BUILTIN", "CircuitBreaker", "NodeHealth", "TagResult", "Tagger", "open_tagger"]
