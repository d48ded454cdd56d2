"""A kube-scheduler extender: keep critical pods off at-risk GPUs, rank nodes by warden's packing.

kube-scheduler POSTs ``ExtenderArgs`` (``{"Pod": ..., "Nodes": {...}}``, or with
``nodeCacheCapable: true`` only ``{"Pod": ..., "NodeNames": [...]}``) to ``/filter`` and
``/prioritize`` (k8s.io/kube-scheduler/extender/v1; its Go types carry no JSON tags, so the keys
are the Go field names and are matched here without regard to case, as Go's decoder does).

filter      A pod that is not interruptible (no toleration of ``gpuwarden.io/at-risk`` and no
            label ``gpuwarden.io/interruptible=true``) and asks for GPUs through the device
            plugin loses every node with an at-risk GPU and an idle GPU: the kubelet, not the
            scheduler, picks the device, so any idle GPU may be the one it hands out. Pods whose
            GPUs come through DRA claims keep all nodes: device taints steer those per GPU.
            Answer: ``ExtenderFilterResult`` with the nodes kept and the others in
            ``FailedAndUnresolvableNodes`` (preempting pods would not make the GPU healthy).
prioritize  ``HostPriorityList``, 0..10: 10 for the nodes warden (the policy that beats FGD on
            openb, docs/scheduler.md) would take first, else its FGD score / 10, at most 9.
bind        not used: kube-scheduler binds, the kubelet picks devices.

The cluster picture (``_k8s_view.ClusterView``) comes from listing Nodes and Pods every
``resync_s`` seconds; node annotations in the request (``nodeCacheCapable: false``) win over it.
"""

from __future__ import annotations

import json
import logging
import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler.policies import TaskMix, WardenPolicy
from gpuwarden.scheduler_hooks._k8s_view import (
    ClusterView,
    GpuMark,
    marked_gpus,
    pod_job,
    uses_dra,
)

logger = logging.getLogger(__name__)

MAX_PRIORITY = 10  # extender/v1 MaxExtenderPriority
MAX_BODY_BYTES = 64 << 20  # a NodeList of 5,000 nodes is about 50 MiB


def field(args: Mapping[str, Any], name: str) -> Any:
    """``args[name]`` matched without case, as Go's encoding/json matches struct fields."""
    if name in args:
        return args[name]
    low = name.lower()
    return next((v for k, v in args.items() if k.lower() == low), None)


class Extender:
    """Filter and prioritize on one ``ClusterView`` (replaced whole by ``set_view``)."""

    def __init__(
        self,
        view: ClusterView | None = None,
        *,
        policy: WardenPolicy | None = None,
        cache: bool = True,
    ):
        self.view = view
        # without a policy given, each picture brings one whose task mix is the bound pods'
        # (FGD's "workload mix"); an empty cluster's policy learns from the pods asked about
        self._own_policy = policy is None
        self.policy = policy if policy is not None else self._policy_for(view)
        self.cache = cache
        self._answers: dict[tuple[Any, ...], bytes] = {}
        self._lock = threading.Lock()
        self.calls = {"filter": 0, "prioritize": 0, "cached": 0, "refused": 0}
        self._index_cache: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}
        self._filtered: dict[tuple[int, bool, tuple[str, ...]], bytes] = {}
        self._head_cache: dict[tuple[str, ...], list[str]] = {}

    def set_view(self, view: ClusterView) -> None:
        with self._lock:
            self.view = view
            self._answers, self._filtered = {}, {}
            if self._own_policy:
                self.policy = self._policy_for(view)

    @staticmethod
    def _policy_for(view: ClusterView | None) -> WardenPolicy:
        jobs = view.jobs if view is not None else []
        return WardenPolicy(TaskMix.from_jobs(jobs) if jobs else None)

    def _args(self, args: Any) -> tuple[dict[str, Any], list[str], dict[str, Any] | None]:
        if not isinstance(args, dict):
            raise InputError("ExtenderArgs must be a JSON object")
        pod = field(args, "Pod")
        if not isinstance(pod, dict):
            raise InputError("ExtenderArgs has no Pod")
        names, objs = field(args, "NodeNames"), None
        nodes = field(args, "Nodes")
        if names is None and isinstance(nodes, dict):
            items = nodes.get("items") or []
            objs = {(n.get("metadata") or {}).get("name", ""): n for n in items}
            names = list(objs)
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise InputError("ExtenderArgs needs NodeNames (a list of names) or Nodes (a NodeList)")
        return pod, names, objs

    def filter(self, args: Any) -> dict[str, Any]:
        """``ExtenderArgs`` -> ``ExtenderFilterResult``; ``InputError`` for malformed args."""
        return json.loads(self.filter_json(args))

    def filter_json(self, args: Any) -> bytes:
        """``filter`` as the JSON text itself, the HTTP route's answer. With node names the
        answer depends only on the names, the picture and whether the pod is critical, so the
        last few are kept whole."""
        pod, names, objs = self._args(args)
        job = pod_job(pod)
        with self._lock:
            self.calls["filter"] += 1
            view = self.view
        wants_gpu = job.gpus_per_task > 0 or job.mig_profile is not None
        critical = wants_gpu and not job.interruptible and not uses_dra(pod)
        if objs is not None:  # the request's Node objects are fresher than the picture
            failed: dict[str, str] = {}
            if critical:
                marked = {n: marked_gpus(_notes(o), AT_RISK_GPUS) for n, o in objs.items()}
                failed = self._unsafe(names, marked, view)
            items = [objs[n] for n in names if n not in failed]
            nodes = {**(field(args, "Nodes") or {}), "items": items}
            return _result(failed, "Nodes", nodes)
        key = (id(view), critical, tuple(names))
        if (hit := self._filtered.get(key)) is None:
            failed = {}
            if critical:  # only nodes with an at-risk GPU need a look
                marked = {n: m for n, m in (view.at_risk if view else {}).items() if m}
                failed = self._unsafe(names, marked, view)
            hit = _result(failed, "NodeNames", [n for n in names if n not in failed])
            self._filtered = {**dict(list(self._filtered.items())[-7:]), key: hit}
        return hit

    @staticmethod
    def _unsafe(
        names: list[str], marked: dict[str, list[GpuMark]], view: ClusterView | None
    ) -> dict[str, str]:
        """Node -> why, for the named nodes a critical pod must not go to."""
        failed = {}
        for name in sorted(set(names).intersection(marked)):
            marks = marked[name]
            if marks and (view is None or name not in view.cluster.index or view.idle_gpus(name)):
                failed[name] = _why(marks)
        return failed

    def prioritize(self, args: Any) -> list[dict[str, Any]]:
        """``ExtenderArgs`` -> ``HostPriorityList``; nodes not in the picture score 0."""
        names, scores = self._scores(args)
        return [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]

    def prioritize_json(self, args: Any) -> bytes:
        """``prioritize`` as the JSON text itself: the HTTP route's answer, built without a
        dict per node (1,213 of them cost more than the ranking). Answers are kept per pod
        shape, node list and picture while the policy's mix is fixed (``cache``): between two
        resyncs the same shape on the same nodes ranks the same."""
        pod, names, _ = self._args(args)
        key = None
        if self.cache and not self.policy.learn:
            key = (id(self.view), pod_job(pod).shape[1:], tuple(names))
            if (hit := self._answers.get(key)) is not None:
                self.calls["cached"] += 1
                self.calls["prioritize"] += 1
                return hit
        names, scores = self._scores(args)
        heads = self._heads(names)
        tails = map(_SCORE_TAIL.__getitem__, scores)
        out = ("[" + ",".join(map(operator.add, heads, tails)) + "]").encode()
        if key is not None:
            if len(self._answers) >= 256:
                self._answers.clear()
            self._answers[key] = out
        return out

    def _scores(self, args: Any) -> tuple[list[str], list[int]]:
        pod, names, _ = self._args(args)
        job = pod_job(pod)
        with self._lock:
            self.calls["prioritize"] += 1
            view = self.view
            if view is None:
                return names, [0] * len(names)
            c = view.cluster
            idx = self._indices(view, names)
            asked = np.zeros(c.n_nodes, dtype=bool)
            asked[idx[idx >= 0]] = True
            score, best = self.policy.rank_nodes(c, job, asked & c.feasible(job))
        pr = np.where(best, MAX_PRIORITY, np.clip(score // 10, 0, MAX_PRIORITY - 1)).astype(int)
        return names, np.where(idx >= 0, pr[idx], 0).tolist()

    def _indices(self, view: ClusterView, names: list[str]) -> np.ndarray:
        """Row of each named node (-1: not in the picture). kube-scheduler sends much the same
        names pod after pod, so the last few answers are kept."""
        key = (id(view), tuple(names))
        idx = self._index_cache.get(key)
        if idx is None:
            index = view.cluster.index
            idx = np.fromiter((index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
            self._index_cache = {**dict(list(self._index_cache.items())[-3:]), key: idx}
        return idx

    def _heads(self, names: list[str]) -> list[str]:
        key = tuple(names)
        heads = self._head_cache.get(key)
        if heads is None:
            heads = ['{"Host":' + json.dumps(n) + ',"Score":' for n in names]
            self._head_cache = {**dict(list(self._head_cache.items())[-3:]), key: heads}
        return heads


_SCORE_TAIL = [f"{s}}}" for s in range(MAX_PRIORITY + 1)]


AT_RISK_GPUS = "gpuwarden.io/at-risk-gpus"


def _result(failed: dict[str, str], key: str, kept: Any) -> bytes:
    """An ``ExtenderFilterResult`` as JSON: Go's field names, compact."""
    out = {"FailedNodes": {}, "FailedAndUnresolvableNodes": failed, "Error": "", key: kept}
    return json.dumps(out, separators=(",", ":")).encode()


def _notes(node: dict[str, Any]) -> dict[str, str]:
    return (node.get("metadata") or {}).get("annotations") or {}


def _why(marks: list[GpuMark]) -> str:
    gpus = ", ".join(f"{m.index}" + (f" ({m.uuid})" if m.uuid else "") for m in marks)
    return (
        f"gpuwarden: GPU {gpus} at risk and the kubelet may hand it to this pod; "
        "interruptible pods tolerate gpuwarden.io/at-risk"
    )


class KubeSource:
    """Lists Nodes and bound Pods through ``api`` (a ``kubernetes.client.CoreV1Api``) and
    hands ``on_view`` a fresh ``ClusterView`` every ``resync_s`` seconds."""

    def __init__(
        self,
        api: Any,
        on_view: Callable[[ClusterView], None],
        *,
        resync_s: float = 5.0,
        timeout_s: float = 10.0,
    ) -> None:
        self.api, self.on_view = api, on_view
        self.resync_s, self.timeout_s = resync_s, timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    def sync(self) -> ClusterView:
        import json

        from gpuwarden.scheduler_hooks._k8s_api import call

        nodes = call("list nodes", self._list, self.api.list_node)
        pods = call(
            "list pods",
            self._list,
            self.api.list_pod_for_all_namespaces,
            "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
        )
        view = ClusterView(json.loads(nodes.data)["items"], json.loads(pods.data)["items"])
        self.on_view(view)
        return view

    def _list(self, fn: Callable[..., Any], fields: str = "") -> Any:
        opts: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout_s}
        return fn(field_selector=fields, **opts) if fields else fn(**opts)

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.resync_s):
                try:
                    self.sync()
                except Exception as exc:  # keep the last picture and keep trying
                    self.failures += 1
                    logger.warning("gpuwarden extender: resync failed: %s", exc)

        self._thread = threading.Thread(target=loop, name="k8s-resync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


#: The extender's routes: path -> (method, Extender method or "healthz").
ROUTES = {
    "/filter": ("POST", "filter_json"),
    "/prioritize": ("POST", "prioritize_json"),
    "/healthz": ("GET", "healthz"),
}


def make_app(extender: Extender, *, max_body_bytes: int = MAX_BODY_BYTES) -> Any:
    """The extender's ASGI app behind ``BodyGuard``: ``POST /filter``, ``POST /prioritize``,
    ``GET /healthz`` (``ROUTES``). Malformed JSON or args answer 400 with ``{"Error": ...}``
    and change nothing. No token: kube-scheduler's extender client sends none, and the routes
    change no state; listen on 127.0.0.1 beside kube-scheduler (the default) or behind TLS.

    Three fixed routes need no router: a plain ASGI callable answers them, which saves a
    framework's per-request work on a path kube-scheduler calls twice per pod."""
    from gpuwarden.httpguard import BodyGuard

    async def reply(send: Any, status: int, body: bytes) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        method, name = ROUTES.get(scope["path"], ("", ""))
        if not name:
            return await reply(send, 404, dumps({"Error": f"no route {scope['path']}"}))
        if scope["method"] != method:
            return await reply(send, 405, dumps({"Error": f"{scope['path']} takes {method}"}))
        if name == "healthz":
            view = extender.view
            body = {"nodes": 0 if view is None else view.cluster.n_nodes, **extender.calls}
            return await reply(send, 200 if view is not None else 503, dumps(body))
        chunks, more = [], True
        while more:  # BodyGuard hands the body over in one message; a client may not have one
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        try:
            got = getattr(extender, name)(json.loads(b"".join(chunks)))  # depth: BodyGuard's
        except (InputError, ValueError) as exc:
            extender.calls["refused"] += 1
            return await reply(send, 400, dumps({"Error": str(exc)}))
        await reply(send, 200, got if isinstance(got, bytes) else dumps(got))

    return BodyGuard(app, authenticate=lambda request: None, max_body_bytes=max_body_bytes)


__all__ = ["MAX_PRIORITY", "ROUTES", "Extender", "KubeSource", "field", "make_app"]
