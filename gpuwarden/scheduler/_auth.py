"""Bearer tokens of the scheduler service: tenants, the admin and node agents.

Tokens come from the environment only (never the settings file) and only their SHA-256 digests
are kept in memory; a presented token is hashed and compared with every digest through
``hmac.compare_digest``, so neither the comparison nor the loop stops early on a match.

    GPUWARDEN_SCHEDULER_TOKENS       path of a TOML file: [tenants] team-a = "token..."
    GPUWARDEN_SCHEDULER_TOKENS_JSON  or the same inline: {"team-a": "token..."}
    GPUWARDEN_SCHEDULER_ADMIN_TOKEN  sees every tenant, sets quotas and GPU health
    GPUWARDEN_AGENT_TOKEN            node agents (register, sync)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tomllib
from collections.abc import Mapping

from gpuwarden.errors import ConfigError
from gpuwarden.scheduler.service import Principal

ENV_TENANT_TOKENS = "GPUWARDEN_SCHEDULER_TOKENS"
ENV_TENANT_TOKENS_JSON = "GPUWARDEN_SCHEDULER_TOKENS_JSON"
ENV_ADMIN_TOKEN = "GPUWARDEN_SCHEDULER_ADMIN_TOKEN"
ENV_AGENT_TOKEN = "GPUWARDEN_AGENT_TOKEN"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenBook:
    """Who each token belongs to, by digest."""

    def __init__(
        self, tenants: Mapping[str, str], *, admin: str | None = None, agent: str | None = None
    ) -> None:
        entries = [(_digest(tok), Principal("tenant", name)) for name, tok in tenants.items()]
        if admin:
            entries.append((_digest(admin), Principal("admin")))
        if agent:
            entries.append((_digest(agent), Principal("agent")))
        if len({d for d, _ in entries}) != len(entries):
            raise ConfigError("two scheduler principals share a token; give each its own")
        for name, tok in tenants.items():
            if not isinstance(tok, str) or len(tok) < 8:
                raise ConfigError(f"the token of tenant {name} must be a string of 8+ characters")
        self._entries = entries

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TokenBook:
        env = os.environ if environ is None else environ
        tenants: dict[str, str] = {}
        if path := env.get(ENV_TENANT_TOKENS):
            try:
                with open(path, "rb") as f:
                    tenants.update(tomllib.load(f).get("tenants", {}))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"{ENV_TENANT_TOKENS}={path}: {exc}") from exc
        if inline := env.get(ENV_TENANT_TOKENS_JSON):
            try:
                tenants.update(json.loads(inline))
            except (ValueError, TypeError, AttributeError) as exc:
                raise ConfigError(f"{ENV_TENANT_TOKENS_JSON} is not a JSON object: {exc}") from exc
        return cls(tenants, admin=env.get(ENV_ADMIN_TOKEN), agent=env.get(ENV_AGENT_TOKEN))

    @property
    def tenants(self) -> list[str]:
        return sorted(p.name for _, p in self._entries if p.kind == "tenant")

    def who(self, authorization: str) -> Principal | None:
        """The principal of an ``Authorization: Bearer ...`` header value, or None."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = _digest(token.strip())
        found = None
        for digest, principal in self._entries:
            if hmac.compare_digest(digest, given):
                found = principal
        return found


__all__ = [
    "ENV_ADMIN_TOKEN",
    "ENV_AGENT_TOKEN",
    "ENV_TENANT_TOKENS",
    "ENV_TENANT_TOKENS_JSON",
    "TokenBook",
]
