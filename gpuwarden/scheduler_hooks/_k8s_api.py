"""The Kubernetes client, loaded and called the one way every Kubernetes backend uses it.

``api_client_from`` picks the credentials (in-cluster service account, else a kubeconfig);
``call`` runs one request and turns the client's errors into ``HookError`` with the API
server's own message, a 409 into ``Conflict`` (the caller re-reads and retries) and, where
asked, a 404 into None.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from gpuwarden.errors import ConfigError, HookError


def api_client_from(
    kubeconfig: str | None,
    context: str | None,
    url: str = "k8s://",
    option: str = "--kubeconfig",
) -> Any:
    """A ``kubernetes.client.ApiClient``: in-cluster when run in a pod (and no kubeconfig is
    named), else from ``kubeconfig`` (default ~/.kube/config) and ``context``. ``option`` is
    how the caller's user names a kubeconfig, for the error."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise ConfigError(
            "the Kubernetes hook needs the kubernetes client: pip install 'gpuwarden[k8s]'"
        ) from exc
    try:
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ConfigError(
            f"{url}: cannot load Kubernetes credentials from {where}: {exc} (give a kubeconfig "
            f"with {option} or $KUBECONFIG, or run in a pod with a service account)"
        ) from exc


def call(
    what: str, fn: Callable[..., Any], *args: Any, not_found: str = "", missing_ok: bool = False
) -> Any:
    """``fn(*args)`` with the client's errors as ``HookError`` (a 409 as ``Conflict``; a 404
    as None when ``missing_ok``, as when deleting what is already gone)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return fn(*args)
    except ApiException as exc:
        if exc.status == 409:
            raise Conflict() from exc
        if exc.status == 404 and missing_ok:
            return None
        if exc.status == 404 and not_found:
            raise HookError(f"kubernetes: {not_found}") from exc
        raise HookError(f"kubernetes: {what} failed: {exc.status} {_api_reason(exc)}") from exc
    except (HTTPError, OSError, ValueError) as exc:
        raise HookError(f"kubernetes: {what} failed: {exc}") from exc


class Conflict(Exception):
    """The object changed since it was read (HTTP 409): read it again and retry."""


def _api_reason(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


__all__ = ["Conflict", "api_client_from", "call"]
