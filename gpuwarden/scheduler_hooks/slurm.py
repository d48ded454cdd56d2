"""Tag Slurm nodes with ``scontrol``.

Healthy nodes carry a feature (default ``gpuwarden_healthy``; put it in slurm.conf's
``NodeName=... Feature=gpuwarden_healthy``) that critical jobs request with
``sbatch --constraint=gpuwarden_healthy``; interruptible jobs do not ask for it.

    at-risk    feature removed                       (only jobs without the constraint land there)
    unhealthy  feature removed and the node drained  scontrol update NodeName=N State=DRAIN
                                                     Reason="gpuwarden: GPU 3 unhealthy: ..."
    ok         feature restored; resumed if gpuwarden drained it (its Reason starts with
               "gpuwarden:"), never a node an admin drained

The node is read first (``scontrol -o show node N``) and only what differs is changed, so
applying the same health twice runs no update. Features set by scontrol last until slurmctld
restarts with a slurm.conf that says otherwise; the service re-applies its view on start.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Sequence
from urllib.parse import parse_qsl, urlsplit

from gpuwarden.errors import ConfigError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import Echo, NodeHealth, TagResult, default_echo
from gpuwarden.wording import plural

DEFAULT_FEATURE = "gpuwarden_healthy"
REASON_PREFIX = "gpuwarden:"
Runner = Callable[[Sequence[str]], str]


def parse_node(line: str) -> dict[str, str]:
    """One ``scontrol -o show node`` line -> field -> value. ``Reason`` comes last and keeps its
    spaces (and its ``[user@time]`` suffix)."""
    head, sep, reason = line.strip().partition(" Reason=")
    fields = dict(tok.split("=", 1) for tok in head.split() if "=" in tok)
    if sep:
        fields["Reason"] = reason
    return fields


def _features(value: str | None) -> list[str]:
    if not value or value == "(null)":
        return []
    return [f for f in value.split(",") if f]


def plan_updates(node: dict[str, str], want: NodeHealth, feature: str) -> list[list[str]]:
    """The ``scontrol update`` argument lists that make ``node`` show ``want`` ([] if none)."""
    name = node.get("NodeName", want.hostname)
    available = _features(node.get("AvailableFeatures"))
    active = _features(node.get("ActiveFeatures"))
    flags = set(node.get("State", "").split("+"))
    ours = node.get("Reason", "").startswith(REASON_PREFIX)
    state = want.state
    cmds: list[list[str]] = []
    if state is GpuState.OK and (feature not in available or feature not in active):
        new_available = available + [f for f in [feature] if f not in available]
        new_active = active + [f for f in [feature] if f not in active]
        cmds.append(_features_update(name, new_available, new_active))
    elif state is not GpuState.OK and (feature in available or feature in active):
        new_available = [f for f in available if f != feature]
        new_active = [f for f in active if f != feature]
        cmds.append(_features_update(name, new_available, new_active))
    if state is GpuState.UNHEALTHY and "DRAIN" not in flags:
        bad = ",".join(map(str, want.indices(GpuState.UNHEALTHY))) or "?"
        reason = f"{REASON_PREFIX} GPU {bad} unhealthy: {want.reason}".strip().rstrip(":")
        reason = " ".join(reason.split())[:200]  # one line; scontrol keeps it short
        cmds.append(["update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}"])
    elif state is not GpuState.UNHEALTHY and "DRAIN" in flags and ours:
        cmds.append(["update", f"NodeName={name}", "State=RESUME"])
    return cmds


def _features_update(name: str, available: list[str], active: list[str]) -> list[str]:
    return [
        "update",
        f"NodeName={name}",
        f"AvailableFeatures={','.join(available)}",
        f"ActiveFeatures={','.join(active)}",
    ]


class SlurmTagger:
    """Features and drains through ``scontrol``. ``slurm_conf``: the cluster's slurm.conf
    (default: scontrol's own, ``$SLURM_CONF`` or /etc/slurm/slurm.conf). ``run``: test seam,
    ``argv -> stdout``, raising ``HookError``."""

    name = "slurm"

    def __init__(
        self,
        *,
        feature: str = DEFAULT_FEATURE,
        scontrol: str = "scontrol",
        slurm_conf: str | None = None,
        dry_run: bool = False,
        echo: Echo = default_echo,
        timeout_s: float = 30.0,
        run: Runner | None = None,
    ) -> None:
        if not feature or any(c in feature for c in ",|&!() "):
            raise ConfigError(f"Slurm feature must be one plain word, not {feature!r}")
        self.feature = feature
        self.scontrol = scontrol
        self.slurm_conf = slurm_conf
        self.dry_run = dry_run
        self.timeout_s = timeout_s
        self._echo = echo
        self._run = run or self._subprocess

    @classmethod
    def from_url(cls, url: str, *, dry_run: bool = False) -> SlurmTagger:
        """``slurm://?feature=gpuwarden_healthy&conf=/etc/slurm/slurm.conf&scontrol=PATH``."""
        params = dict(parse_qsl(urlsplit(url).query))
        unknown = set(params) - {"feature", "conf", "scontrol"}
        if unknown:
            raise ConfigError(
                f"{url}: unknown {plural(len(unknown), 'parameter')} {', '.join(sorted(unknown))}"
            )
        return cls(
            feature=params.get("feature", DEFAULT_FEATURE),
            scontrol=params.get("scontrol", "scontrol"),
            slurm_conf=params.get("conf"),
            dry_run=dry_run,
        )

    def show(self, hostname: str) -> dict[str, str]:
        """The node as ``scontrol -o show node`` reports it."""
        out = self._run([self.scontrol, "-o", "show", "node", hostname]).strip()
        if not out.startswith("NodeName="):
            raise HookError(f"slurm: no node named {hostname!r} ({out[:200]})")
        return parse_node(out.splitlines()[0])

    def apply(self, node: NodeHealth) -> TagResult:
        cmds = plan_updates(self.show(node.hostname), node, self.feature)
        if not cmds:
            return TagResult(False, f"node {node.hostname} already {node.state}", self.dry_run)
        shown = "; ".join(shlex.join([self.scontrol, *c]) for c in cmds)
        if self.dry_run:
            for c in cmds:
                self._echo(f"[dry-run] slurm: {shlex.join([self.scontrol, *c])}")
            return TagResult(True, f"would run {shown}", True)
        for c in cmds:
            self._run([self.scontrol, *c])
        return TagResult(True, f"ran {shown}")

    def _subprocess(self, argv: Sequence[str]) -> str:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        try:
            out = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=self.timeout_s, env=env
            )
        except FileNotFoundError as exc:
            raise HookError(f"slurm: {argv[0]} not found: is Slurm installed here?") from exc
        except subprocess.TimeoutExpired as exc:
            raise HookError(f"slurm: {shlex.join(argv)} hung for {self.timeout_s:g} s") from exc
        if out.returncode != 0:
            why = (out.stderr or out.stdout).strip().splitlines()
            raise HookError(
                f"slurm: {shlex.join(argv)} failed ({out.returncode}): {why[-1] if why else ''}"
            )
        return out.stdout


__all__ = ["DEFAULT_FEATURE", "REASON_PREFIX", "SlurmTagger", "parse_node", "plan_updates"]
