"""HTTP requests to addresses users name (a job's checkpoint hook of kind ``url``), allowed
only to the networks the ``hook_allow`` setting lists.

A tenant's URL must not turn a node agent into a way into the node or its cloud: loopback
services, link-local addresses, and above all the cloud metadata endpoints (169.254.169.254,
fd00:ec2::254, metadata.google.internal, ...) that hand out the machine's credentials.

    hook_allow = "public,private"             # the default
    hook_allow = "public,private,loopback"    # also the node itself (127.0.0.0/8, ::1)
    hook_allow = "10.20.0.0/16,fd12::/64"     # only these networks

Each entry is a kind (``public``: globally routed; ``private``: 10/8, 172.16/12, 192.168/16,
100.64/10, fc00::/7; ``loopback``; ``link-local``: 169.254/16, fe80::/10) or a network. The
cloud metadata addresses and names are refused whatever the setting says, and so is what no
entry covers (0.0.0.0, multicast, reserved ranges).

The check is made on the address actually connected to: ``post_json`` resolves the host itself,
refuses it if any of its addresses is not allowed, and connects to the address it checked (so a
name that resolves to one address for the check and another for the connection gains nothing);
it follows redirects itself, and each new connection is checked again. An IPv4 address written
as IPv6 (``::ffff:169.254.169.254``, NAT64, 6to4) is checked as the IPv4 address it carries.
No proxy from the environment is used: the proxy's address would be checked, not the target's.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuwarden.errors import ConfigError, HookError, OutboundRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

KINDS = ("public", "private", "loopback", "link-local")

#: Cloud metadata endpoints: AWS, GCP, Azure, Oracle (169.254.169.254), AWS over IPv6,
#: AWS ECS task metadata, Alibaba Cloud. Never allowed.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)
METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data",
     "instance-data.ec2.internal", "metadata.azure.internal"}
)  # fmt: skip
_PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)

Resolver = Callable[..., list[tuple[Any, ...]]]


def _unwrap(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), else ``ip``."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def kind_of(ip: IPAddress) -> str:
    """``metadata``, ``loopback``, ``link-local``, ``private``, ``public`` or ``special``."""
    ip = _unwrap(ip)
    if ip in METADATA_ADDRESSES:
        return "metadata"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if any(ip in net for net in _PRIVATE if net.version == ip.version):
        return "private"
    if ip.is_global and not ip.is_multicast:
        return "public"
    return "special"


@dataclass(frozen=True)
class OutboundPolicy:
    """Which addresses outbound hooks may reach: ``kinds`` and ``networks`` (see the module);
    the default is the ``hook_allow`` setting's, public and private."""

    kinds: frozenset[str] = frozenset({"public", "private"})
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str, name: str = "hook_allow") -> OutboundPolicy:
        """``"public,private,10.0.0.0/8"`` -> the policy; ConfigError naming a bad entry."""
        kinds: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in (e.strip() for e in text.split(",")):
            if not entry:
                continue
            if entry.lower() in KINDS:
                kinds.add(entry.lower())
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise ConfigError(
                    f"{name}: {entry!r} is neither one of {', '.join(KINDS)} nor a network "
                    "such as 10.0.0.0/8"
                ) from None
        return cls(frozenset(kinds), tuple(networks))

    def refusal(self, ip: IPAddress) -> str | None:
        """Why ``ip`` may not be reached ("a loopback address, which ..."), or None."""
        kind = kind_of(ip)
        if kind == "metadata":
            return "a cloud metadata address"
        if kind in self.kinds:
            return None
        plain = _unwrap(ip)
        if any(plain in net for net in self.networks if net.version == plain.version):
            return None
        return f"a {kind} address, which hook_allow does not allow"

    def addresses(self, host: str, port: int, resolve: Resolver = socket.getaddrinfo) -> list[str]:
        """The addresses of ``host`` to connect to, each checked; OutboundRefused when the
        name is a metadata name or any of its addresses is refused."""
        refused = name_refusal(host)
        if refused:
            raise OutboundRefused(refused)
        found: list[str] = []
        for *_, sockaddr in resolve(host, port, type=socket.SOCK_STREAM):
            addr = str(sockaddr[0])
            why = self.refusal(ipaddress.ip_address(addr.partition("%")[0]))
            if why:
                literal = addr == host.strip("[]")
                raise OutboundRefused(
                    f"{addr} is {why}" if literal else f"{host} resolves to {addr}, {why}"
                )
            if addr not in found:
                found.append(addr)
        if not found:
            raise OutboundRefused(f"{host} has no address")
        return found


def name_refusal(host: str) -> str | None:
    """Why ``host`` (a name or a literal address) is refused whatever ``hook_allow`` says."""
    name = host.strip("[]").rstrip(".").lower()
    if name in METADATA_HOSTS:
        return f"{host} is a cloud metadata name"
    try:
        ip = ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        return None
    return f"{host} is a cloud metadata address" if kind_of(ip) == "metadata" else None


def _backend(policy: OutboundPolicy, resolve: Resolver) -> Any:
    import httpcore

    class CheckedBackend(httpcore.SyncBackend):
        """httpcore's sockets, but only to addresses ``policy`` allows, checked at connect."""

        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> Any:
            last: Exception | None = None
            for addr in policy.addresses(host, port, resolve):
                try:
                    return super().connect_tcp(addr, port, timeout, local_address, socket_options)
                except httpcore.ConnectError as exc:
                    last = exc
            assert last is not None  # addresses() returns at least one
            raise last

    return CheckedBackend()


def post_json(
    url: str,
    body: Any,
    *,
    policy: OutboundPolicy,
    timeout_s: float = 5.0,
    resolve: Resolver = socket.getaddrinfo,
) -> int:
    """POST ``body`` as JSON to ``url`` and return the final HTTP status (redirects followed,
    at most ``MAX_REDIRECTS``; 303, 301 and 302 turn into a GET as browsers do). The response
    body is not read. ``OutboundRefused`` when an address on the way is not allowed;
    ``httpcore`` errors when one cannot be reached."""
    import httpcore
    import httpx

    content: bytes | None = json.dumps(body).encode()
    method = "POST"
    target = httpx.URL(url)
    timeouts = {"connect": timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
    with httpcore.ConnectionPool(
        ssl_context=ssl.create_default_context(), network_backend=_backend(policy, resolve)
    ) as pool:
        for _ in range(MAX_REDIRECTS + 1):
            if target.scheme not in ("http", "https"):
                raise OutboundRefused(f"{target.scheme}:// is not http or https")
            headers = [(b"Content-Type", b"application/json")] if content is not None else []
            with pool.stream(
                method,
                str(target),
                headers=headers,
                content=content,
                extensions={"timeout": timeouts},
            ) as response:
                status = response.status
                location = next((v for k, v in response.headers if k.lower() == b"location"), None)
            if status not in _REDIRECTS or location is None:
                return status
            target = target.join(location.decode("latin-1"))
            if status in (301, 302, 303):
                method, content = "GET", None
    raise HookError(f"more than {MAX_REDIRECTS} redirects from {url}")


__all__ = [
    "METADATA_ADDRESSES",
    "METADATA_HOSTS",
    "OutboundPolicy",
    "kind_of",
    "name_refusal",
    "post_json",
]
