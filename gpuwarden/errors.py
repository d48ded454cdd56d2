"""gpuwarden's exceptions, in one place.

    GpuwardenError
    ├── ConfigError            a setting or URL that cannot be used
    │   └── UnknownSchemeError no collector or store for that URL scheme
    ├── CollectorError         a telemetry source failed
    │   ├── CollectorUnavailable  the source is not there at all (no NVML library, no nvidia-smi)
    │   └── CollectorTimeout      the source hung (nvidia-smi on a sick GPU does)
    ├── StoreError             the time-series store failed
    │   ├── SchemaError        the store's schema is newer than this gpuwarden
    │   ├── StoreUnavailable   a store's server cannot be reached, times out or keeps failing
    │   └── StoreRejected      a store's server refused a request (credentials, a bad query)
    ├── InputError             a user's file or payload is malformed; names the problem
    ├── DeviceSetupError       the agent could not set a GPU up for a task (MIG instance, MPS)
    └── HookError              a scheduler hook or notifier failed (Slurm, Kubernetes, Slack)
        └── OutboundRefused    a hook's URL leads to an address ``hook_allow`` refuses

Backend errors are translated where they are caught and re-raised ``from exc``; the CLI turns
any ``GpuwardenError`` into one line on stderr and a non-zero exit.
"""

from __future__ import annotations


class GpuwardenError(Exception):
    """Base class of every error gpuwarden raises on purpose."""


class ConfigError(GpuwardenError):
    pass


class UnknownSchemeError(ConfigError):
    pass


class CollectorError(GpuwardenError):
    pass


class CollectorUnavailable(CollectorError):
    pass


class CollectorTimeout(CollectorError):
    pass


class StoreError(GpuwardenError):
    pass


class SchemaError(StoreError):
    pass


class StoreUnavailable(StoreError):
    pass


class StoreRejected(StoreError):
    """The server answered, with a 4xx: ``status`` is its HTTP status."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class InputError(GpuwardenError):
    pass


class HookError(GpuwardenError):
    pass


class OutboundRefused(HookError):
    pass


class DeviceSetupError(GpuwardenError):
    """The node agent could not give a task its GPU share: a MIG instance NVML refused to create
    (no MIG, no permission, slices in use), or an MPS control daemon that would not start."""
