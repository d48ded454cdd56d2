"""The LLM behind the report's prose: any OpenAI-compatible chat-completions server, through the
openai SDK (``pip install 'gpuwarden[report]'``).

Settings: ``llm_base_url`` and ``llm_model``; the key only from ``$GPUWARDEN_LLM_API_KEY``.
With neither a base URL nor a key there is no LLM and the report is built from templates. A
base URL without a key (a local Ollama or vLLM server) is sent a placeholder key. Answers are
streamed (``stream_options.include_usage`` asks for the token counts at the end); a server that
answers 400 to that (older vLLM, Ollama and Azure API versions reject parameters they do not
know) is asked once more without streaming, and from then on the client does not stream: the
token counts come from the plain answer's ``usage``, or are reported as unknown. The SDK
retries timeouts, 429s and 5xx ``llm_retries`` times with its backoff, honouring
``Retry-After``. The key never reaches a log line, the prompt or the report: only the SDK's
Authorization header carries it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.errors import ConfigError, GpuwardenError
from gpuwarden.wording import counted

logger = logging.getLogger(__name__)
ENV_API_KEY = "GPUWARDEN_LLM_API_KEY"
#: Sent when a base URL is set without a key: local servers ignore it, the SDK requires one.
NO_KEY = "no-key"


class LlmUnavailable(GpuwardenError):
    """The LLM could not answer (timeouts, 429s, 5xx, refused connections) after its retries."""


@dataclass(frozen=True)
class LlmConfig:
    base_url: str
    model: str
    api_key: str = field(repr=False)
    timeout_s: float = 60.0
    retries: int = 2
    temperature: float = 0.2

    def describe(self) -> str:
        """Where the prose comes from, for the report: server and model, never the key."""
        return f"{self.model} at {self.base_url or 'the OpenAI API'}"


def llm_config(
    cfg: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> LlmConfig | None:
    """The LLM the settings name, or None when none is configured (templates only)."""
    environ = os.environ if environ is None else environ
    base_url = str(cfg.get("llm_base_url") or "").strip()
    key = environ.get(ENV_API_KEY, "").strip()
    if not base_url and not key:
        return None
    model = str(cfg.get("llm_model") or "").strip()
    if not model:
        raise ConfigError(
            "an LLM is configured (llm_base_url or $GPUWARDEN_LLM_API_KEY) but llm_model is "
            "empty: set GPUWARDEN_LLM_MODEL (e.g. deepseek-chat, llama3.1)"
        )
    timeout = float(cfg.get("llm_timeout_s", 60.0))
    retries = int(cfg.get("llm_retries", 2))
    if not timeout > 0 or retries < 0:
        raise ConfigError("llm_timeout_s must be > 0 and llm_retries >= 0")
    return LlmConfig(base_url, model, key or NO_KEY, timeout, retries)


@dataclass
class Usage:
    """Tokens the LLM calls used, as the server reported them (None: it did not say).

    ``calls`` counts every request, failed ones too; ``unreported`` the answered calls whose
    server gave no token counts, so a total that leaves some out says so."""

    calls: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    unreported: int = 0

    def add(self, usage: Any) -> None:
        """An answered call and the ``usage`` object the server sent with it (or None)."""
        self.calls += 1
        if usage is None or usage.prompt_tokens is None:
            self.unreported += 1
            return
        self.prompt_tokens = (self.prompt_tokens or 0) + int(usage.prompt_tokens)
        self.completion_tokens = (self.completion_tokens or 0) + int(usage.completion_tokens or 0)

    def failed(self) -> None:
        """A call the server refused or never answered: no tokens to count."""
        self.calls += 1

    @property
    def total_tokens(self) -> int | None:
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens + (self.completion_tokens or 0)

    def describe(self) -> str:
        """The cost line of the report: "1,720 tokens (1,500 prompt, 220 completion) in 1 LLM
        call", never a count the server did not give."""
        calls = counted(self.calls, "LLM call")
        if self.prompt_tokens is None:
            return f"{calls}; the server did not report tokens"
        text = (f"{counted(self.total_tokens, 'token')} ({self.prompt_tokens:,} prompt, "
                f"{self.completion_tokens or 0:,} completion) in {calls}")  # fmt: skip
        if self.unreported:
            text += (
                f"; {counted(self.unreported, 'answer')} came without token counts (not included)"
            )
        return text


class LlmClient:
    """One chat completion at a time, streamed where the server allows it; ``usage`` adds up
    every call's tokens."""

    def __init__(self, config: LlmConfig) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - the extra is not installed
            raise ConfigError(
                "the LLM needs the openai SDK: pip install 'gpuwarden[report]'"
            ) from exc
        self.config = config
        self._openai = openai
        self._client = openai.OpenAI(
            api_key=config.api_key,
            base_url=config.base_url or None,
            timeout=config.timeout_s,
            max_retries=config.retries,
        )
        self.usage = Usage()
        #: False once the server has refused a streamed request with ``stream_options``
        self.streams = True

    def complete(self, messages: list[dict[str, str]]) -> str:
        openai = self._openai
        try:
            if self.streams:
                try:
                    text, usage = self._streamed(messages)
                except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                    # the request is the same as the plain one but for stream/stream_options,
                    # so one plain retry tells whether those were what the server refused
                    self.usage.failed()
                    logger.warning("the LLM server refused a streamed request (HTTP %s); asking "
                                   "again without streaming", exc.status_code)  # fmt: skip
                    text, usage = self._plain(messages)
                    self.streams = False
            else:
                text, usage = self._plain(messages)
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            self.usage.failed()
            raise LlmUnavailable(f"the LLM did not answer ({type(exc).__name__})") from exc
        except openai.APIStatusError as exc:
            self.usage.failed()
            raise LlmUnavailable(f"the LLM answered HTTP {exc.status_code}") from exc
        except openai.OpenAIError as exc:
            self.usage.failed()
            raise LlmUnavailable(f"the LLM failed ({type(exc).__name__})") from exc
        self.usage.add(usage)
        return text

    def _streamed(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
        stream = self._client.chat.completions.create(  # type: ignore[call-overload]
            model=self.config.model,
            messages=messages,
            temperature=self.config.temperature,
            stream=True,
            stream_options={"include_usage": True},
        )
        parts: list[str] = []
        usage = None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta and choice.delta.content:
                    parts.append(choice.delta.content)
        return "".join(parts), usage

    def _plain(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
        answer = self._client.chat.completions.create(
            model=self.config.model,
            messages=messages,  # type: ignore[arg-type]
            temperature=self.config.temperature,
        )
        text = "".join(c.message.content or "" for c in answer.choices[:1])
        return text, answer.usage

    def close(self) -> None:
        self._client.close()
