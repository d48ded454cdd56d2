"""Wake-on-LAN: the magic packet that powers a sleeping node back on.

A magic packet is six 0xFF bytes and the target's MAC address sixteen times (102 bytes), sent
as a UDP broadcast, by convention to port 9 (discard); the NIC of a suspended or soft-off
machine with WoL armed (``ethtool -s eth0 wol g``) watches for it. Command line equivalent:
``wakeonlan 00:11:22:33:44:55`` or ``etherwake``.
"""

from __future__ import annotations

import re
import socket

from gpuwarden.errors import InputError

WOL_PORT = 9
_MAC = re.compile(r"^[0-9A-Fa-f]{2}([:-]?)(?:[0-9A-Fa-f]{2}\1){4}[0-9A-Fa-f]{2}$")


def magic_packet(mac: str) -> bytes:
    """The 102-byte packet for ``mac`` (``00:11:22:33:44:55``, ``-`` or no separators)."""
    if not _MAC.match(mac.strip()):
        raise InputError(f"not a MAC address: {mac!r}")
    raw = bytes.fromhex(re.sub(r"[:-]", "", mac.strip()))
    return b"\xff" * 6 + raw * 16


def send_magic_packet(mac: str, *, host: str = "255.255.255.255", port: int = WOL_PORT) -> bytes:
    """Send ``mac``'s magic packet by UDP to ``host`` (the broadcast address of the node's
    subnet, e.g. ``10.0.0.255``); returns the packet sent."""
    packet = magic_packet(mac)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.sendto(packet, (host, port))
    return packet


__all__ = ["WOL_PORT", "magic_packet", "send_magic_packet"]
