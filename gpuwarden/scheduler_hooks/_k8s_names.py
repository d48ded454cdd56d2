"""Host name -> Kubernetes Node name.

Collectors report the host name the GPU's machine gives itself; a Node is named by whoever
registered it (the kubelet's ``--hostname-override``, a cloud provider's instance name), so the
two differ on many clusters. The kubelet always labels its Node ``kubernetes.io/hostname`` with
the machine's host name, so by default the Node is found by that label
(``kubectl get nodes -l kubernetes.io/hostname=HOST``). Another label can be named
(``node-label=example.com/host``), or none (``node-label=``: host names are node names).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from gpuwarden.errors import HookError

HOSTNAME_LABEL = "kubernetes.io/hostname"


class NodeNames:
    """Resolves and remembers host -> Node name. ``api``: a ``kubernetes.client.CoreV1Api``."""

    def __init__(self, api: Any, label: str = HOSTNAME_LABEL, *, timeout_s: float = 10.0) -> None:
        self.api = api
        self.label = label
        self.timeout_s = timeout_s
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def resolve(self, host: str) -> str:
        """The Node name of ``host``; ``HookError`` when no Node, or more than one, has it."""
        if not self.label:
            return host
        with self._lock:
            known = self._known.get(host)
        if known is not None:
            return known
        from gpuwarden.scheduler_hooks._k8s_api import call

        selector = f"{self.label}={host}"
        resp = call(f"list nodes -l {selector}", self._list, selector)
        names = sorted(n["metadata"]["name"] for n in json.loads(resp.data).get("items") or [])
        if not names:
            raise HookError(f"kubernetes: no node has label {selector}")
        if len(names) > 1:
            raise HookError(f"kubernetes: nodes {', '.join(names)} all have label {selector}")
        with self._lock:
            self._known[host] = names[0]
        return names[0]

    def forget(self, host: str) -> None:
        """Drop what is remembered of ``host`` (its Node was replaced or renamed)."""
        with self._lock:
            self._known.pop(host, None)

    def _list(self, selector: str) -> Any:
        return self.api.list_node(
            label_selector=selector, _preload_content=False, _request_timeout=self.timeout_s
        )


__all__ = ["HOSTNAME_LABEL", "NodeNames"]
