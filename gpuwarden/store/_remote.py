"""HTTP for stores that live on a server (Prometheus, VictoriaMetrics, InfluxDB).

    url = parse_remote_url("victoriametrics://user:pw@vm:8428/prefix?timeout=30",
                           schemes={"victoriametrics": ("http", 8428)}, params=("timeout",))
    http = RemoteHttp(url.base, what="VictoriaMetrics", auth=url.auth, timeout_s=30)
    response = http.request("GET", "/api/v1/query", params={"query": "up"})

One place for what every remote backend needs:

- a URL check that fails in one line (no host, a bad port, an unknown parameter);
- credentials masked wherever a URL is shown (``user:***@host``, ``?token=***``); a bearer token
  comes from an environment variable, never from a URL or a log;
- timeouts, and retries with exponential backoff (and the server's ``Retry-After``) on a refused
  or dropped connection, a timeout, 5xx and 429;
- one clear line for everything else: the server unreachable, the credentials refused (401,
  403), a request the server rejects (another 4xx, with the server's own message), each a
  ``StoreError`` a command prints and ``serve`` survives.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import httpx

from gpuwarden.errors import ConfigError, StoreError, StoreRejected, StoreUnavailable

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 4
#: first backoff; it doubles each try (with jitter) up to ``MAX_BACKOFF_S``
BACKOFF_S = 0.5
MAX_BACKOFF_S = 15.0
#: query parameters whose values are secrets, masked in every URL shown
SECRET_PARAMS = frozenset({"token", "password", "secret", "api_key", "apikey", "auth"})
#: statuses worth another try
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_T = TypeVar("_T")


def mask(url: str) -> str:
    """``url`` with its password and secret query values replaced by ``***``, for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        name = user.split(":", 1)[0]
        netloc = f"{name}:***@{host}" if ":" in user else f"{name}@{host}"
    query = "&".join(
        f"{k}=***" if k.lower() in SECRET_PARAMS else (f"{k}={v}" if v else k)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


@dataclass(frozen=True)
class RemoteUrl:
    """A store URL taken apart: ``base`` (``http(s)://host:port/path``, no credentials),
    ``auth`` (user, password) or None, ``params`` (the URL's query), ``shown`` (masked)."""

    scheme: str
    base: str
    shown: str
    auth: tuple[str, str] | None = None
    params: Mapping[str, str] = field(default_factory=dict)


def parse_remote_url(
    url: str, *, schemes: Mapping[str, tuple[str, int]], params: Iterable[str] = ()
) -> RemoteUrl:
    """Check and split ``url``. ``schemes`` maps each accepted URL scheme to the HTTP scheme
    it speaks and the default port (``{"victoriametrics": ("http", 8428)}``); ``params`` are
    the query parameters the backend takes. Anything else is a one-line ``ConfigError``."""
    shown = mask(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{shown}: not a usable URL ({exc})") from exc
    if parts.scheme not in schemes:
        raise ConfigError(f"{shown}: the scheme must be one of {', '.join(sorted(schemes))}")
    http_scheme, default_port = schemes[parts.scheme]
    host = parts.hostname
    if not host:
        raise ConfigError(f"{shown}: no host (write {parts.scheme}://HOST:{default_port})")
    known = tuple(params)
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in known:
            said = ", ".join(known) if known else "none"
            raise ConfigError(f"{shown}: unknown parameter {key!r}; known: {said}")
        query[key] = value
    bracketed = f"[{host}]" if ":" in host else host
    base = urlunsplit(
        (http_scheme, f"{bracketed}:{port or default_port}", parts.path.rstrip("/"), "", "")
    )
    auth = None
    if parts.username is not None:
        auth = (parts.username, parts.password or "")
    return RemoteUrl(parts.scheme, base, shown, auth, query)


def positive(params: Mapping[str, str], key: str, default: float, shown: str) -> float:
    """A positive number from the URL's query (seconds, counts), or ``default``."""
    if key not in params:
        return default
    text = params[key]
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{shown}: {key} must be a positive number, not {text!r}")
    return value


def token_header(env: str, scheme: str = "Bearer") -> dict[str, str]:
    """``{"Authorization": f"{scheme} <token>"}`` from the environment variable ``env``, or
    ``{}`` when it is unset. The token never appears in a URL, a message or a log."""
    token = os.environ.get(env, "")
    return {"Authorization": f"{scheme} {token}"} if token else {}


def server_message(response: httpx.Response) -> str:
    """What the server said was wrong, on one line: the ``error`` (Prometheus,
    VictoriaMetrics) or ``message`` (InfluxDB) of a JSON body, else the body's first line."""
    text = response.text.strip()
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("error", "message"):
            if isinstance(body.get(key), str) and body[key]:
                text = body[key]
                break
    first = text.splitlines()[0] if text else response.reason_phrase
    return first[:300]


class RemoteHttp:
    """One HTTP client for a store's server: timeouts, retries with backoff, one-line errors.

    ``what`` names the server in messages ("Prometheus at http://host:9090"). ``retries``: how
    many times a request is tried again after a refused or dropped connection, a timeout, a
    5xx or a 429 (waiting ``BACKOFF_S``, doubling, with jitter, or the server's
    ``Retry-After``). ``client`` and ``sleep`` are test seams.
    """

    def __init__(
        self,
        base: str,
        *,
        what: str,
        shown: str | None = None,
        auth: tuple[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base = base.rstrip("/")
        self.name = f"{what} at {shown or mask(self.base)}"
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self._sleep = sleep
        self._owns = client is None
        self._client = client or httpx.Client(
            auth=auth, headers=dict(headers or {}), timeout=self.timeout_s
        )
        #: requests that were tried again, for tests and the benchmark
        self.retried = 0

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        content: bytes | None = None,
        data: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request (retrying as above) and return a 2xx response; anything else
        raises ``StoreUnavailable`` (not reached, 5xx after the retries), or ``StoreRejected``
        (credentials refused, another 4xx), each one line naming the server."""
        return self.fetch(
            method, path, _whole, params=params, content=content, data=data, headers=headers
        )

    def fetch(
        self,
        method: str,
        path: str,
        parse: Callable[[httpx.Response], _T],
        *,
        params: Any = None,
        content: bytes | None = None,
        data: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> _T:
        """``request``, and ``parse`` of its 2xx answer in the same try: a body ``parse``
        finds cut short or malformed (it raises ``ValueError``: a server that failed after
        its headers were sent ends its answer early) is asked for again, as a dropped
        connection is, and after the retries raises ``StoreUnavailable`` saying so."""
        url = self.base + path

        def attempt() -> _T:
            try:
                response = self._client.request(
                    method,
                    url,
                    params=params,
                    content=content,
                    data=data,
                    headers=headers,
                    timeout=self.timeout_s,
                )
            except httpx.TimeoutException as exc:
                raise Retryable(
                    StoreUnavailable(
                        f"{self.name}: no answer within {self.timeout_s:g} s "
                        f"({self.retries + 1} tries)"
                    )
                ) from exc
            except httpx.TransportError as exc:
                raise Retryable(
                    StoreUnavailable(f"{self.name}: cannot reach it ({_reason(exc)})")
                ) from exc
            except httpx.InvalidURL as exc:
                raise StoreError(f"{self.name}: bad request URL ({exc})") from exc
            if response.is_success:
                try:
                    return parse(response)
                except ValueError as exc:
                    raise Retryable(
                        StoreUnavailable(
                            f"{self.name}: {path} answered a body cut short or malformed "
                            f"({self.retries + 1} tries): {str(exc)[:200]}"
                        )
                    ) from exc
            if response.status_code not in RETRY_STATUS:
                raise self._rejected(response)
            raise Retryable(
                StoreUnavailable(
                    f"{self.name}: HTTP {response.status_code} {response.reason_phrase} "
                    f"after {self.retries + 1} tries: {server_message(response)}"
                ),
                wait_s=retry_after(response.headers.get("Retry-After")),
            )

        def counted() -> None:
            self.retried += 1

        return with_retries(attempt, retries=self.retries, sleep=self._sleep, on_retry=counted)

    def _rejected(self, response: httpx.Response) -> StoreError:
        code = response.status_code
        said = server_message(response)
        if code in (401, 403):
            return StoreRejected(
                f"{self.name} refused the credentials (HTTP {code}): {said}", status=code
            )
        if code == 404:
            return StoreRejected(
                f"{self.name}: HTTP 404 for {response.request.url.path} (is this the right "
                f"server and path?): {said}",
                status=code,
            )
        return StoreRejected(
            f"{self.name} rejected the request (HTTP {code} {response.reason_phrase}): {said}",
            status=code,
        )

    def close(self) -> None:
        if self._owns:
            self._client.close()


class Retryable(Exception):
    """A try that may succeed when made again (a dropped connection, a timeout, 5xx, 429):
    ``error`` is what the caller sees when it was the last; ``wait_s`` the server's
    ``Retry-After``."""

    def __init__(self, error: Exception, wait_s: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait_s = wait_s


def with_retries(
    attempt: Callable[[], _T],
    *,
    retries: int,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[], None] | None = None,
) -> _T:
    """``attempt()``, made again up to ``retries`` times while it raises ``Retryable``: after
    ``BACKOFF_S``, doubling up to ``MAX_BACKOFF_S``, with jitter (or at least the server's
    ``Retry-After``); then its ``error`` is raised. The one backoff every remote store uses
    (``RemoteHttp`` for Prometheus and VictoriaMetrics, ``_influx_http`` for InfluxDB)."""
    delay = BACKOFF_S
    for n in range(retries + 1):
        try:
            return attempt()
        except Retryable as exc:
            if n == retries:
                raise exc.error from exc.__cause__
            if exc.wait_s is not None:  # the server's word: no sooner than it said
                wait = min(MAX_BACKOFF_S, exc.wait_s) * (1.0 + 0.25 * random.random())
            else:
                wait = min(MAX_BACKOFF_S, delay) * (0.75 + 0.5 * random.random())
            if on_retry is not None:
                on_retry()
            sleep(wait)
            delay *= 2
    raise AssertionError("unreachable")  # the last try returns or raises


def retry_after(text: str | None) -> float | None:
    """A ``Retry-After`` of seconds, as a float; None when absent or a date."""
    try:
        return max(0.0, float(text)) if text else None
    except ValueError:
        return None


def _whole(response: httpx.Response) -> httpx.Response:
    return response


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "Connection refused" in text or "ECONNREFUSED" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return text.splitlines()[0][:200]


__all__ = [
    "RETRY_STATUS",
    "RemoteHttp",
    "Retryable",
    "RemoteUrl",
    "mask",
    "parse_remote_url",
    "positive",
    "server_message",
    "retry_after",
    "token_header",
    "with_retries",
]
