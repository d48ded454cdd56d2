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

from gpuwarden.plugins import open_by_scheme
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
    tagger: Tagger = open_by_scheme(
        url, BUILTIN, group="gpuwarden.taggers", what="scheduler hook", dry_run=dry_run
    )
    return tagger


__all__ = ["BUILTIN", "CircuitBreaker", "NodeHealth", "TagResult", "Tagger", "open_tagger"]
