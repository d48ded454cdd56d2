"""Bearer tokens of the scheduler service: tenants, the admin and node agents.

Tokens come from the environment only (never the settings file) and only their SHA-256 digests
are kept in memory; a presented token is hashed and compared with every digest through
``hmac.compare_digest``, so neither the comparison nor the loop stops early on a match.

Each node agent has its own token, bound to the node's name: the service holds one master
secret and the token of node N is ``hex(HMAC-SHA256(secret, "gpuwarden-agent:" + N))``, so no
list of nodes has to be kept and a token taken from one node cannot speak for another. An agent
request is checked against the token of the node its path names. The master secret itself
authenticates nobody: it belongs on the service, not on the nodes.

    GPUWARDEN_SCHEDULER_TOKENS       path of a TOML file: [tenants] team-a = "token..."
    GPUWARDEN_SCHEDULER_TOKENS_JSON  or the same inline: {"team-a": "token..."}
    GPUWARDEN_SCHEDULER_ADMIN_TOKEN  sees every tenant, sets quotas and GPU health
    GPUWARDEN_AGENT_SECRET           master secret of the node agents' tokens
    GPUWARDEN_AGENT_TOKEN            the same when GPUWARDEN_AGENT_SECRET is unset (deployments
                                     from before per-node tokens); on a node, its own token
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
ENV_AGENT_SECRET = "GPUWARDEN_AGENT_SECRET"
ENV_AGENT_TOKEN = "GPUWARDEN_AGENT_TOKEN"

#: Names a node may register under: hostnames and Kubernetes node names fit. A node's token
#: is bound to its exact name, so ``agent-token`` checks names by the same rule.
NODE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"

#: Shortest master secret taken: every node token is only as strong as it.
MIN_SECRET_CHARS = 16


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def agent_secret_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The master secret of the agents' tokens: ``GPUWARDEN_AGENT_SECRET``, else the older
    ``GPUWARDEN_AGENT_TOKEN``; None when neither is set."""
    env = os.environ if environ is None else environ
    return env.get(ENV_AGENT_SECRET) or env.get(ENV_AGENT_TOKEN) or None


def node_token(secret: str, node: str) -> str:
    """The agent token of ``node``: ``gpuwarden scheduler agent-token NODE`` prints it."""
    message = f"gpuwarden-agent:{node}".encode()
    # surrogateescape: a secret read from an environment that is not UTF-8 still hashes
    key = secret.encode("utf-8", "surrogateescape")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


class TokenBook:
    """Who each token belongs to, by digest; ``agent`` is the master secret of node tokens."""

    def __init__(
        self, tenants: Mapping[str, str], *, admin: str | None = None, agent: str | None = None
    ) -> None:
        for name, tok in tenants.items():
            if not isinstance(tok, str) or len(tok) < 8:
                raise ConfigError(f"the token of tenant {name} must be a string of 8+ characters")
        if agent is not None and len(agent) < MIN_SECRET_CHARS:
            raise ConfigError(
                f"{ENV_AGENT_SECRET} must be {MIN_SECRET_CHARS}+ characters: every node's "
                "agent token is derived from it"
            )
        entries = [(_digest(tok), Principal("tenant", name)) for name, tok in tenants.items()]
        if admin:
            entries.append((_digest(admin), Principal("admin")))
        digests = [d for d, _ in entries] + ([_digest(agent)] if agent else [])
        if len(set(digests)) != len(digests):
            raise ConfigError("two scheduler principals share a token; give each its own")
        self._entries = entries
        self._secret = agent or None
        self._secret_digest = _digest(agent) if agent else None

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
        return cls(tenants, admin=env.get(ENV_ADMIN_TOKEN), agent=agent_secret_from_env(env))

    @property
    def tenants(self) -> list[str]:
        return sorted(p.name for _, p in self._entries if p.kind == "tenant")

    def gaps(self) -> list[str]:
        """What the service cannot do with these tokens, one phrase each (empty: nothing)."""
        out = []
        if not any(p.kind in ("tenant", "admin") for _, p in self._entries):
            out.append(
                f"no tenant or admin token ({ENV_TENANT_TOKENS}, {ENV_TENANT_TOKENS_JSON}, "
                f"{ENV_ADMIN_TOKEN}): every request from a person will be refused"
            )
        if self._secret is None:
            out.append(f"no {ENV_AGENT_SECRET}: no node agent can register")
        return out

    def who(self, token: str) -> Principal | None:
        """The tenant or admin a bearer token belongs to, or None (node tokens: ``is_node``)."""
        given = _digest(token)
        found = None
        for digest, principal in self._entries:
            if hmac.compare_digest(digest, given):
                found = principal
        return found

    def is_secret(self, token: str) -> bool:
        """Whether ``token`` is the master secret, which must not reach (or come from) a node."""
        return self._secret_digest is not None and hmac.compare_digest(
            self._secret_digest, _digest(token)
        )

    def is_node(self, token: str, node: str) -> bool:
        """Whether ``token`` is the agent token of ``node``."""
        if self._secret is None:
            return False
        return hmac.compare_digest(_digest(node_token(self._secret, node)), _digest(token))


def bearer(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header value, or None."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


__all__ = [
    "ENV_ADMIN_TOKEN",
    "ENV_AGENT_SECRET",
    "ENV_AGENT_TOKEN",
    "ENV_TENANT_TOKENS",
    "ENV_TENANT_TOKENS_JSON",
    "NODE_NAME",
    "TokenBook",
    "agent_secret_from_env",
    "bearer",
    "node_token",
]
