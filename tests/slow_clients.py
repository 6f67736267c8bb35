"""Slow clients, as a hostile user runs them: each opens a connection (TLS where the server speaks it), sends the
start of a request and then one more header byte every ``pace`` seconds, never finishing, and connects again when
the server closes it. All of them on one asyncio loop in a thread of their own (or a process: bench/), so a
hundred of them cost the test a thread, not a hundred.

Used by the servers' slow-client tests (tests/kube/test_webhook_slow_clients.py, tests/web/test_slow_clients.py)
and by bench/slow_clients.py.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable

START = b"POST /mutate-pods HTTP/1.1\r\nHost: localhost\r\nX-Slow: "


class SlowClients:
    """``count`` slow clients of ``127.0.0.1:port``; :meth:`start` returns once each holds a connection with its
    first bytes sent (or, with ``holding=False``, once each has tried: a server that refuses connections never
    lets them all hold), or raises after ``timeout``; :meth:`stop` ends them."""

    def __init__(self, port: int, count: int, *, pace: float = 1.0, tls: Callable[[], ssl.SSLContext] | None = None,
                 start: bytes = START) -> None:
        self.port, self.count, self.pace, self.tls, self.start_bytes = port, count, pace, tls, start
        self.holding = 0  # clients whose connection is open and has its first bytes
        self.connections = 0  # connections opened, reconnections included
        self.cut = 0  # connections the server closed
        self._tried_ids: set[int] = set()  # clients that connected or were refused at least once
        self._all_holding = threading.Event()
        self._all_tried = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def start(self, timeout: float = 60.0, *, holding: bool = True) -> None:
        self._thread.start()
        if not (self._all_holding if holding else self._all_tried).wait(timeout):
            self.stop()
            raise TimeoutError(f"only {self.holding} of {self.count} slow clients connected in {timeout:g}s")

    def stop(self) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout=30.0)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        clients = [asyncio.create_task(self._client(i)) for i in range(self.count)]
        await self._stopping.wait()
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)

    def _tried(self, i: int) -> None:
        self._tried_ids.add(i)
        if len(self._tried_ids) >= self.count:
            self._all_tried.set()

    async def _client(self, i: int) -> None:
        context = self.tls() if self.tls is not None else None
        while True:
            writer: asyncio.StreamWriter | None = None
            held = False
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, ssl=context, server_hostname="localhost" if context else None)
                self.connections += 1
                writer.write(self.start_bytes)
                await writer.drain()
                held = True
                self.holding += 1
                if self.holding >= self.count:
                    self._all_holding.set()
                self._tried(i)
                while True:  # a byte per pace, until the server closes the connection
                    try:
                        if await asyncio.wait_for(reader.read(1024), self.pace) == b"":
                            break
                    except TimeoutError:
                        pass
                    writer.write(b"x")
                    await writer.drain()
                self.cut += 1
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                self.cut += held  # a reset or a broken pipe: the server ended it too
                self._tried(i)
            finally:
                if held:
                    self.holding -= 1
                if writer is not None:
                    writer.transport.abort()
            # Reconnect at once, as a hostile client does; after a refused connection, at the client's pace.
            await asyncio.sleep(0 if held else self.pace)
