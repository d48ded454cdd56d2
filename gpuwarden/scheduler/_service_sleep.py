"""Idle-node sleep inside the scheduler service (``sleep.py``'s controller over its scheduler).

After every placement round the controller looks at each node's utilisation and the queue. A
node's utilisation is the larger of its GPUs' allocation share and their measured utilisation
over the usage window (``_service_usage.py``, sent by agents with NVML): a node whose GPUs are
allocated but idle has jobs on it and is not calm, and one whose GPUs are free but busy (work
outside the scheduler) is not idle either. Where a node's GPUs are not all measured (no NVML,
``--fake-gpus``, a service restarted less than a window ago) allocation alone decides, and the
action's reason says so ("by allocation, not measured"). A node
it puts to sleep is told so in its agent's next sync answer (``"sleep": true``); the agent runs
its sleep command (``gpuwarden agent --sleep-command``). A sleeping node's agent stops syncing,
so the node-liveness rule passes over sleeping and waking nodes: they are not lost. To wake one
the service sends a Wake-on-LAN magic packet to the MAC address its agent registered (``--mac``),
to ``broadcast``; the node takes work again ``cold_start_s`` later. The scheduler is rebuilt
from the database now and then, so the controller follows the current one and closes its
draining and sleeping nodes in it again. Dry run (the default policy) only logs.

Every node not awake is kept in the database's ``sleep`` table too (its state, when a waking node
takes work, when its magic packet went, whether its agent still has to be told to sleep), written
in the same transaction as the round that changed it: a restarted service does not take a
sleeping node for an idle awake one, nor its silence for a lost node, and still wakes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from gpuwarden.scheduler._service_lifecycle import JobLifecycle
from gpuwarden.scheduler._service_usage import UsageWindow
from gpuwarden.scheduler.sleep import NodeSleep, SleepController, SleepPolicy
from gpuwarden.scheduler.state import SleepRow
from gpuwarden.scheduler.wol import WOL_PORT, send_magic_packet
from gpuwarden.wording import counted

logger = logging.getLogger("gpuwarden.scheduler.service")

#: seconds after a woken node's cold start within which its agent is expected to sync again
BOOT_GRACE_S = 600.0


class ServiceSleep:
    def __init__(
        self,
        lifecycle: JobLifecycle,
        policy: SleepPolicy,
        *,
        broadcast: str = "255.255.255.255",
        port: int = WOL_PORT,
        send: Callable[..., bytes] = send_magic_packet,
        usage: UsageWindow | None = None,
    ) -> None:
        self.lifecycle, self.policy = lifecycle, policy
        self.usage = usage if usage is not None else UsageWindow()
        self.broadcast, self.port, self._send = broadcast, port, send
        self.ctl: SleepController | None = None
        self._orders: set[str] = set()  # nodes to tell to sleep in their next sync
        self._woken: dict[str, float] = {}  # node -> when its magic packet went, until it syncs
        #: what the database holds, node -> row (awake nodes have none)
        self._saved = {r.node: r for r in lifecycle.db.sleep_rows()}
        self._logged = 0  # actions of the controller's log already saved
        self._hold = lifecycle.db.sleep_hold()  # the queue's hold on draining, as saved
        for r in self._saved.values():
            if r.woken_at is not None:
                self._woken[r.node] = r.woken_at
            if r.order_pending:
                self._orders.add(r.node)
        if self._saved and policy.dry_run:
            logger.warning("%s left asleep or draining by a run that slept nodes; "
                           "a dry run wakes none of them: %s",
                           counted(len(self._saved), "node was", "nodes were"),
                           ", ".join(sorted(self._saved)))  # fmt: skip

    def _controller(self) -> SleepController | None:
        s = self.lifecycle.scheduler
        if s is None:
            return None
        if self.ctl is None:
            self.ctl = SleepController(s, self.policy, wake=self._wake, sleep=self._orders.add)
            if self._hold is not None:
                self.ctl.hold_until = self._hold
            for r in self._saved.values():  # as the last run left them
                if r.node in s.cluster.index:
                    self.ctl.state[r.node] = NodeSleep(r.state)
                    if r.ready_at is not None:
                        self.ctl.ready_at[r.node] = r.ready_at
        elif self.ctl.s is not s:  # rebuilt from the database
            self.ctl.s = s
        ctl = self.ctl
        for node in [n for n in ctl.state if n not in s.cluster.index]:
            del ctl.state[node]  # lost or gone
            ctl.ready_at.pop(node, None)
            self._logged = -1  # its row goes at the next save
        for node in s.cluster.names:
            st = ctl.state.setdefault(node, NodeSleep.AWAKE)
            if st is not NodeSleep.AWAKE and not self.policy.dry_run:
                s.set_open(node, False)
        return ctl

    def after_round(self, now: float) -> None:
        """Sleep, drain or wake nodes by the policy and the queue."""
        ctl = self._controller()
        if ctl is None:
            return
        c = ctl.s.cluster
        used = np.where(c.exists, 1000 - c.free, 0).sum(axis=1) / np.maximum(c.n_gpus, 1) / 1000
        share: dict[str, float] = {}
        basis: dict[str, str] = {}
        for i, n in enumerate(c.names):
            gpus = [int(g) for g in np.flatnonzero(c.exists[i])]
            measured = self.usage.node_share(n, gpus, now)
            if measured is None:
                share[n], basis[n] = float(used[i]), "by allocation, not measured"
            else:
                share[n] = max(float(used[i]), measured)
                basis[n] = f"measured {measured:.0%}, allocated {float(used[i]):.0%}"
        ctl.step(now, share, basis)
        ctl.need(now, ctl.s.pending)
        if ctl.hold_until != (self._hold if self._hold is not None else -float("inf")):
            self._hold = ctl.hold_until
            self.lifecycle.db.put_sleep_hold(ctl.hold_until)
        if len(ctl.log) != self._logged:  # every change of state is an action in the log
            self._logged = len(ctl.log)
            self._save()

    def state_of(self, node: str) -> str:
        """``node``'s sleep state: awake, draining, asleep or waking."""
        if self.ctl is not None:
            return str(self.ctl.state.get(node, NodeSleep.AWAKE))
        saved = self._saved.get(node)
        return NodeSleep.AWAKE.value if saved is None else saved.state

    def _rows(self) -> dict[str, SleepRow]:
        ctl = self.ctl
        if ctl is None:
            return dict(self._saved)
        out = {}
        for node, st in ctl.state.items():
            if st is not NodeSleep.AWAKE or node in self._orders or node in self._woken:
                out[node] = SleepRow(node, st.value, ctl.ready_at.get(node),
                                     self._woken.get(node), node in self._orders)  # fmt: skip
        return out

    def _save(self) -> None:
        """Write the rows that changed since the last save (none, most rounds)."""
        rows = self._rows()
        db = self.lifecycle.db
        for node in self._saved.keys() - rows.keys():
            db.drop_sleep(node)
        for node, row in rows.items():
            if self._saved.get(node) != row:
                db.put_sleep(row)
        self._saved = rows

    def resting(self, node: str, now: float) -> bool:
        """Whether ``node``'s agent's silence is expected: it is asleep, or was woken and has
        not synced yet (for its cold start and ``BOOT_GRACE_S`` more; a node that never comes
        back is lost after that, as any silent node)."""
        if self.state_of(node) == NodeSleep.ASLEEP:
            return True
        woke = self._woken.get(node)
        return woke is not None and now < woke + self.policy.cold_start_s + BOOT_GRACE_S

    def synced(self, node: str) -> None:
        """``node``'s agent synced: it is up."""
        if self._woken.pop(node, None) is not None:
            self._save()

    def order_for(self, node: str) -> bool:
        """Whether ``node``'s agent must run its sleep command now (told once)."""
        if node in self._orders:
            self._orders.discard(node)
            self._save()
            return True
        return False

    def _wake(self, node: str) -> None:
        assert self.ctl is not None
        self._woken[node] = self.ctl.ready_at.get(node, 0.0) - self.policy.cold_start_s
        row = self.lifecycle.db.node(node)
        mac = next((g.get("mac") for g in (row.gpus if row else ()) if g.get("mac")), None)
        if mac is None:
            logger.warning("cannot wake %s: its agent registered no MAC address (--mac)", node)
            return
        self._send(mac, host=self.broadcast, port=self.port)
        logger.warning("sent the Wake-on-LAN packet for %s (%s) to %s", node, mac, self.broadcast)
