"""The ``influxdb://`` store's HTTP side: influxdb-client set up once, writes and Flux queries
with timeouts and retries, and every failure as one line with the token masked.

    http = InfluxHttp(parse_influx_url(url), token=None)    # token: $GPUWARDEN_INFLUX_TOKEN
    http.send(lines, "write_batch")                        # requests of ``batch`` lines
    frame = http.query(flux, "read_samples")               # annotated CSV -> one frame

Retries are the other remote stores' (``_remote.with_retries``; urllib3's own are off): on a
refused or dropped connection, a timeout, 5xx and 429, ``retries`` times after the first try,
backing off 0.5 s, 1 s, 2 s... with jitter, or waiting the server's ``Retry-After``. Writes
and queries are both idempotent, so both are retried.
Writes are gzip-compressed here at level 1 (the client's own gzip, level 9, took longer than
sending); query answers are asked for gzipped and inflated by urllib3.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd
from urllib3.exceptions import HTTPError

from gpuwarden.errors import ConfigError, InputError, StoreError
from gpuwarden.store import _flux
from gpuwarden.store._remote import RETRY_STATUS, Retryable, retry_after, with_retries
from gpuwarden.store._url import INFLUX_TOKEN_ENV, InfluxUrl

if TYPE_CHECKING:
    from influxdb_client import InfluxDBClient


_T = TypeVar("_T")


def token_from_env() -> str:
    """The first of ``INFLUX_TOKEN_ENV`` that is set, or ""."""
    for name in INFLUX_TOKEN_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return ""


class InfluxHttp:
    """influxdb-client for one ``InfluxUrl`` (see the module docstring)."""

    def __init__(self, config: InfluxUrl, token: str | None = None) -> None:
        self.config = config
        self.url = config.url
        self._token = token_from_env() if token is None else token
        try:
            from influxdb_client import InfluxDBClient, WriteService
            from urllib3.util.retry import Retry
        except ImportError as exc:  # an extra, as the dashboard's streamlit is
            raise ConfigError(
                f"{self.url} needs influxdb-client: pip install 'gpuwarden[influx]'"
            ) from exc
        # one try per call here: ``with_retries`` makes the others (a point written twice is
        # one point, so writes are retried too)
        retry = Retry(total=0, raise_on_status=False)
        self._client: InfluxDBClient | None = InfluxDBClient(
            url=config.base,
            token=self._token,
            org=config.org,
            timeout=int(config.timeout_s * 1000),
            retries=retry,
        )
        self._client.api_client.default_headers["Accept-Encoding"] = "gzip"
        self._writes = WriteService(self._client.api_client)
        self._queries = self._client.query_api()

    def mask(self, text: str) -> str:
        """``text`` with the token replaced by ``***``."""
        # a token too short to be secret would garble the message it is masked in
        return text.replace(self._token, "***") if len(self._token) >= 6 else text

    def error(self, what: str, exc: Exception, *, writing: bool = False) -> StoreError | InputError:
        """One line for what went wrong, the token masked; a write the server refuses as
        malformed is an ``InputError`` (sending it again cannot help)."""
        status = getattr(exc, "status", None)
        message = server_message(exc)
        where = f"{what} on {self.url}"
        if status in (401, 403):
            text = (
                f"{where}: the server refused the token ({status}); set "
                f"${INFLUX_TOKEN_ENV[0]} to a token for org {self.config.org!r} that may "
                f"use bucket {self.config.bucket!r}"
            )
        elif status in (400, 413, 422) and writing:
            return InputError(
                self.mask(f"{where}: the server refused the points ({status}): {message}")
            )
        elif isinstance(status, int) and status >= 400:
            text = f"{where}: the server answered {status}: {message}"
        else:
            text = f"{where}: cannot reach {self.config.base}: {message}"
        return StoreError(self.mask(text))

    def _open(self) -> None:
        if self._client is None:
            raise StoreError(f"the store {self.url} is closed")

    def send(
        self, lines: Iterable[str], what: str, *, progress: Callable[[int], Any] | None = None
    ) -> int:
        """Write ``lines`` in requests of ``batch_lines``; returns how many were sent.
        ``progress`` is told each request's count."""
        self._open()
        sent = 0
        chunk: list[str] = []
        for text in lines:
            chunk.append(text)
            if len(chunk) >= self.config.batch_lines:
                sent += self._post(chunk, what, progress)
                chunk = []
        if chunk:
            sent += self._post(chunk, what, progress)
        return sent

    def _try(self, call: Callable[[], _T], what: str, *, writing: bool = False) -> _T:
        """``call()`` with ``_remote.with_retries``; every failure as ``error`` says it."""

        def attempt() -> _T:
            try:
                return call()
            except StoreError:
                raise
            except Exception as exc:  # the client raises urllib3's and its own errors
                status = getattr(exc, "status", None)
                dropped = not isinstance(status, int) and isinstance(exc, (HTTPError, OSError))
                if dropped or status in RETRY_STATUS:
                    headers = getattr(exc, "headers", None) or {}
                    wait = retry_after(headers.get("Retry-After"))
                    raise Retryable(self.error(what, exc, writing=writing), wait) from exc
                raise self.error(what, exc, writing=writing) from exc

        return with_retries(attempt, retries=self.config.retries)

    def _post(self, chunk: list[str], what: str, progress: Callable[[int], Any] | None) -> int:
        body = gzip.compress("\n".join(chunk).encode(), compresslevel=1)
        self._try(
            lambda: self._writes.post_write(
                org=self.config.org,
                bucket=self.config.bucket,
                body=body,
                precision="us",
                content_encoding="gzip",
                content_type="text/plain; charset=utf-8",
            ),
            what,
            writing=True,
        )
        if progress is not None:
            progress(len(chunk))
        return len(chunk)

    def query(self, flux: str, what: str) -> pd.DataFrame:
        """Run ``flux``; every table of the answer in one frame (``_flux.read_csv``)."""
        self._open()
        try:
            return _flux.read_csv(
                self._try(lambda: list(self._queries.query_csv(flux, org=self.config.org)), what)
            )
        except StoreError as exc:
            if str(exc).startswith(f"{what} on "):  # ``error``'s line already
                raise
            raise StoreError(self.mask(f"{what} on {self.url}: {exc}")) from exc

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


def server_message(exc: Exception) -> str:
    """What the server (or the connection) said, on one line."""
    body = getattr(exc, "body", None)
    if body:
        try:
            parsed = json.loads(body)
            if isinstance(parsed, dict) and parsed.get("message"):
                return str(parsed["message"]).splitlines()[0][:300]
        except ValueError:
            pass
        return str(body).splitlines()[0][:300]
    reason = getattr(exc, "reason", None)
    text = str(reason if reason is not None else exc).strip()
    # urllib3 wraps the socket error: "<...HTTPConnection object at 0x..>: Failed to establish
    # a new connection: [Errno 111] Connection refused"
    text = text.rpartition("Failed to establish a new connection: ")[2]
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:300]
