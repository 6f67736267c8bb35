"""What every source whose views never change shares: one version, and waiters that a close releases."""

from __future__ import annotations

import threading


class StaticSource:
    """The change half of :class:`gpufleet.web.contract.DataSource` for a source read once (manifests, a
    simulation result): the version is always 1, and a wait past it lasts until its timeout or the close."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    @property
    def version(self) -> int:
        return 1

    def wait_for_change(self, since: int, timeout: float) -> int:
        if since < 1:
            return 1
        self._closed.wait(timeout)  # the views never change; a closed source stops its waiters at once
        return 1

    def close(self) -> None:
        self._closed.set()
