"""How online batch lines enter the engine: a bounded number at a time, behind online traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class OnlineGate:
    """Admits batch lines into the engine behind online traffic.

    A line starts only while fewer than `max_in_flight` batch lines run and not while online
    requests are in flight with requests queued in the engine: then the engine's free slots go
    to the online requests first, and the batch waits (polling every `poll_s`)."""

    def __init__(self, max_in_flight: int, online_in_flight: Callable[[], int],
                 engine_waiting: Callable[[], int], poll_s: float = 0.02) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.online_in_flight = online_in_flight
        self.engine_waiting = engine_waiting
        self.poll_s = poll_s
        self.running = 0
        self._freed = asyncio.Event()

    def _online_waiting(self) -> bool:
        return self.online_in_flight() > 0 and self.engine_waiting() > 0

    async def acquire(self) -> None:
        while True:
            full = self.running >= self.max_in_flight
            if not full and not self._online_waiting():
                self.running += 1
                return
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), None if full else self.poll_s)
            except asyncio.TimeoutError:
                pass

    def release(self) -> None:
        self.running -= 1
        self._freed.set()
