"""Client-side rate limiting of API calls: a token bucket, as client-go's ``flowcontrol`` rate limiter.

``qps`` tokens are added per second, up to ``burst`` held at once; each call takes one. A caller that finds
the bucket empty *reserves* the next token and sleeps until it is due, so callers are served in the order
they asked (no thundering herd when tokens come back) and a burst of ``burst`` calls goes out at once. A
``qps`` of zero or less disables limiting, as a negative QPS does in client-go.

The scheduler keeps two buckets with the same ``clientConnection`` settings, as kube-scheduler keeps two
clients: one for its writes (Bindings, evictions, conditions, queue statuses) and one for its Events, so a
flood of events never delays a Binding.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if burst < 1 and qps > 0:
            raise ValueError(f"burst must be at least 1 when qps is set, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)  # starts full, as client-go's
        self._at = clock()
        self.waited_s = 0.0  # total time callers slept for a token (for benchmarks and metrics)

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def reserve(self) -> float:
        """Take a token; how long the caller must wait before using it (0: now)."""
        if self.unlimited:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            delay = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self.waited_s += delay
            return delay

    def wait(self) -> None:
        """Block until this caller's token is due."""
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
