"""The ``sim://`` collector: a ``gpuwarden.sim`` fleet read live, one step per ``collect()``.

    open_collector("sim://?nodes=16&gpus=8&seed=1")
    open_collector("sim://?nodes=2&models=H100-80GB,A100-80GB&start=1767225600&resume=1767280000")

This module only reads the URL and wraps ``gpuwarden.sim.LiveFleet``; docs/simulator.md has
the simulator itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from gpuwarden.errors import CollectorError, ConfigError
from gpuwarden.sim import FleetSpec, LiveFleet
from gpuwarden.telemetry import Batch, GpuId


def _names(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


#: URL parameter -> (FleetSpec field, parser)
URL_PARAMS: dict[str, tuple[str, Callable[[str], object]]] = {
    "nodes": ("nodes", int),
    "gpus": ("gpus_per_node", int),
    "rack": ("nodes_per_rack", int),
    "seed": ("seed", int),
    "accel": ("accel", float),
    "step": ("step_s", int),
    "start": ("start_ts", float),
    "sudden": ("sudden_fraction", float),
    "hbm_sudden": ("hbm_sudden_fraction", float),
    "rate": ("failure_rate_per_gpu_day", float),
    "lookalikes": ("lookalike_fraction", float),
    "models": ("models", _names),
    "kinds": ("kinds", _names),
}


def url_params(url: str) -> dict[str, object]:
    """FleetSpec keyword arguments from a ``sim://`` URL; ConfigError names a bad parameter."""
    parts = urlsplit(url)
    if parts.scheme != "sim":
        raise ConfigError(f"not a sim:// URL: {url!r}")
    kwargs: dict[str, object] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in URL_PARAMS:
            known = ", ".join(URL_PARAMS)
            raise ConfigError(f"sim:// parameter {key!r} is unknown; known: {known}")
        name, parse = URL_PARAMS[key]
        try:
            kwargs[name] = parse(value)
        except ValueError as exc:
            kind = getattr(parse, "__name__", "value")
            raise ConfigError(f"sim:// parameter {key}={value!r} is not a valid {kind}") from exc
    return kwargs


def spec_from_url(url: str) -> FleetSpec:
    """``sim://?nodes=16&gpus=8&seed=1&accel=1&step=60&models=H100-80GB,A100-80GB&start=<unix>``
    (also rack, sudden, hbm_sudden, rate, lookalikes, kinds). Raises ConfigError naming a bad parameter.
    ``SimCollector.from_url`` also takes ``resume``."""
    return FleetSpec(**url_params(url))  # type: ignore[arg-type]


class SimCollector:
    """The simulated fleet as a live ``Collector``: each ``collect()`` advances one step."""

    def __init__(
        self,
        spec: FleetSpec,
        *,
        url: str = "sim://",
        buffer_steps: int = 60,
        resume_ts: float | None = None,
    ) -> None:
        """``resume_ts``: start collecting at the first step at or after it, as the fleet that
        began at ``spec.start_ts`` would be by then (the steps between are simulated, unseen)."""
        self.url = url
        self.spec = spec
        # checked here too so the message names the URL parameter, as it always has
        if resume_ts is not None and not (math.isfinite(resume_ts) and resume_ts >= spec.start_ts):
            raise ConfigError(f"sim:// resume={resume_ts!r} must not be before start")
        self._live: LiveFleet | None = LiveFleet(
            spec, buffer_steps=buffer_steps, resume_ts=resume_ts, name=url
        )

    @classmethod
    def from_url(cls, url: str) -> SimCollector:
        """``sim://?...`` as ``spec_from_url``, plus ``resume=<unix>`` to join the fleet later."""
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        spec = spec_from_url(
            urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in pairs if k != "resume"])))
        )
        resume = [v for k, v in pairs if k == "resume"]
        try:
            resume_ts = float(resume[-1]) if resume else None
        except ValueError as exc:
            raise ConfigError(
                f"sim:// parameter resume={resume[-1]!r} is not a valid float"
            ) from exc
        return cls(spec, url=url, resume_ts=resume_ts)

    def _fleet(self) -> LiveFleet:
        if self._live is None:
            raise CollectorError(f"{self.url}: collector is closed")
        return self._live

    def collect(self) -> Batch:
        """Every live GPU's Sample at the next simulated step, with the events since the last."""
        return self._fleet().step()

    def inject_xid(self, hostname: str, index: int, code: int) -> None:
        """Make the next ``collect()`` report Xid ``code`` on that GPU (like a driver log line)."""
        self._fleet().inject_xid(hostname, index, code)

    @property
    def gpus(self) -> list[GpuId]:
        """The boards in their slots now (a slot waiting for a repair is left out)."""
        return self._fleet().gpus

    def close(self) -> None:
        self._live = None


#: Names this module held before the simulator became ``gpuwarden.sim``: still importable from
#: here, with a deprecation warning, until a later release.
_MOVED = frozenset(
    {
        "Fleet", "SimChunk", "RackHeat", "SimResult", "MODELS", "PRECURSOR_KINDS",
        "SUDDEN_KINDS", "FAILURE_KINDS", "DEFAULT_START_TS",
    }
)  # fmt: skip


def __getattr__(name: str) -> object:
    if name in _MOVED:
        import warnings

        import gpuwarden.sim

        warnings.warn(
            f"gpuwarden.collectors.sim.{name} moved to gpuwarden.sim.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(gpuwarden.sim, name)
    raise AttributeError(f"module 'gpuwarden.collectors.sim' has no attribute {name!r}")
