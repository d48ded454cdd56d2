"""The HTTP servers' listening socket: accepted connections must not wait for delayed ACKs."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gpuwarden.errors import ConfigError
from gpuwarden.lifecycle import listening_socket


def test_connections_accepted_on_the_socket_send_without_nagle_delay() -> None:
    # asyncio sets TCP_NODELAY on an accepted connection only when the listening socket says it
    # is TCP; a response written as headers then body otherwise waits ~40 ms for the client's
    # delayed ACK, on every request of every gpuwarden HTTP service
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    seen: list[int] = []

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(main())
    assert seen == [1]


def test_an_address_in_use_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
            listening_socket("127.0.0.1", taken.getsockname()[1])
