"""Slack notifications through an incoming webhook (slack_sdk's ``WebhookClient``).

The webhook URL is a secret: it comes from ``GPUWARDEN_SLACK_WEBHOOK_URL`` (or the
constructor), is never logged, and is shown as ``slack://hooks.slack.com/…`` in health output.

Notices are queued and sent grouped: the first notice waits ``group_wait_s`` (default 10 s) for
others to join, and at most one message goes out per ``min_interval_s`` (default 60 s), so a
rack-wide event that flips 64 GPUs within a minute is one message, not 64. Delivery is retried by
slack_sdk's retry handlers (HTTP 429 honouring Retry-After, 500/503, connection errors); if it
still fails the notices stay queued for the next flush, up to ``max_queue``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from typing import Any

from gpuwarden.alerts._slack_blocks import message
from gpuwarden.alerts.base import Notice
from gpuwarden.errors import ConfigError

logger = logging.getLogger(__name__)
ENV_WEBHOOK_URL = "GPUWARDEN_SLACK_WEBHOOK_URL"


class _Redact(logging.Filter):
    """slack_sdk puts the request URL in some of its log lines: blank the secret out."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if self.secret and self.secret in text:
            record.msg, record.args = text.replace(self.secret, "<slack webhook url>"), None
        return True


class SlackNotifier:
    """``Notifier`` posting Block Kit messages to a Slack incoming webhook.

    ``dashboard_url``: link template for each GPU, with ``{uuid}``, ``{hostname}``, ``{gpu}``
    (e.g. ``http://grafana:3000/d/gpuwarden?var-UUID={uuid}``). ``retries``: per failure kind;
    ``backoff_s``: first wait before retrying a 5xx or a connection error (doubles each time).
    """

    name = "slack"

    def __init__(
        self,
        webhook_url: str | None = None,
        *,
        dashboard_url: str = "",
        group_wait_s: float = 10.0,
        min_interval_s: float = 60.0,
        max_listed: int = 10,
        max_queue: int = 10_000,
        retries: int = 2,
        backoff_s: float = 0.5,
        timeout_s: int = 10,
    ) -> None:
        from slack_sdk.http_retry.builtin_handlers import (
            ConnectionErrorRetryHandler,
            RateLimitErrorRetryHandler,
            ServerErrorRetryHandler,
        )
        from slack_sdk.http_retry.builtin_interval_calculators import (
            BackoffRetryIntervalCalculator,
        )
        from slack_sdk.webhook import WebhookClient

        url = webhook_url or os.environ.get(ENV_WEBHOOK_URL, "")
        if not url.startswith(("https://", "http://")):
            raise ConfigError(
                f"Slack needs an incoming-webhook URL in {ENV_WEBHOOK_URL} (https://hooks.slack.com/...)"
            )
        if group_wait_s < 0 or min_interval_s < 0:
            raise ConfigError("Slack group_wait_s and min_interval_s must be >= 0 seconds")
        self.dashboard_url = dashboard_url
        self.group_wait_s = float(group_wait_s)
        self.min_interval_s = float(min_interval_s)
        self.max_listed = max_listed
        # a logger of our own at WARNING: slack_sdk logs the URL at DEBUG when its logger's own
        # level allows it, whatever the root logger says
        sdk_logger = logging.getLogger(f"{__name__}.sdk")
        sdk_logger.setLevel(logging.WARNING)
        if not any(isinstance(f, _Redact) and f.secret == url for f in sdk_logger.filters):
            sdk_logger.addFilter(_Redact(url))
        backoff = BackoffRetryIntervalCalculator(backoff_factor=backoff_s)
        self._client = WebhookClient(
            url,
            timeout=timeout_s,
            logger=sdk_logger,
            retry_handlers=[
                ConnectionErrorRetryHandler(max_retry_count=retries, interval_calculator=backoff),
                RateLimitErrorRetryHandler(max_retry_count=retries),  # sleeps Retry-After
                ServerErrorRetryHandler(max_retry_count=retries, interval_calculator=backoff),
            ],
        )
        self._queue: deque[Notice] = deque(maxlen=max_queue)
        self._first_ts: float | None = None
        self._last_sent: float | None = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self.sent = 0
        self.failures = 0

    def notify(self, notice: Notice) -> None:
        with self._lock:
            if len(self._queue) == self._queue.maxlen:
                logger.warning("Slack queue full: dropping the oldest notice")
            self._queue.append(notice)
            if self._first_ts is None:
                self._first_ts = notice.ts

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def flush(self, now: float) -> int:
        """Send one grouped message if one is due; returns 1 if sent, else 0."""
        with self._send_lock:  # one delivery at a time
            with self._lock:
                if not self._queue or self._first_ts is None:
                    return 0
                if now - self._first_ts < self.group_wait_s:
                    return 0
                if self._last_sent is not None and now - self._last_sent < self.min_interval_s:
                    return 0
                batch = list(self._queue)
            text, blocks = message(batch, dashboard=self.dashboard_url, max_listed=self.max_listed)
            ok, why = self._send(text, blocks)
            with self._lock:
                if not ok:
                    self.failures += 1
                    logger.error("Slack notification failed (%s); will retry next flush", why)
                    return 0
                for _ in batch:  # notices queued meanwhile stay for the next message
                    self._queue.popleft()
                self._first_ts = self._queue[0].ts if self._queue else None
                self._last_sent = now
                self.sent += 1
                return 1

    def _send(self, text: str, blocks: list[dict[str, Any]]) -> tuple[bool, str]:
        try:
            resp = self._client.send(text=text, blocks=blocks)
        except Exception as exc:  # urllib raises many kinds; none may stop the service
            return False, type(exc).__name__
        if resp.status_code == 200:
            return True, "ok"
        return False, f"HTTP {resp.status_code}: {str(resp.body)[:200]}"


__all__ = ["ENV_WEBHOOK_URL", "SlackNotifier"]
