"""How online batch lines enter the engine: a bounded number at a time, behind online traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class OnlineGate:
    """Admits batch lines into the engine behind online traffic.

    A line starts only while
    - fewer than `max_in_flight` batch lines run;
    - batch and online requests together leave a slot of the engine's `capacity` (its
      max_num_seqs) free, so an arriving online request is scheduled at once instead of waiting
      for a batch line to finish (the engine does not preempt for it), and no batch line ever
      queues in the engine ahead of one;
    - no online request waits in the engine's queue (e.g. for KV blocks).
    Otherwise the batch waits (polling every `poll_s` while online traffic holds it back)."""

    def __init__(self, max_in_flight: int, online_in_flight: Callable[[], int],
                 engine_waiting: Callable[[], int], capacity: int | None = None,
                 poll_s: float = 0.02) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.max_in_flight = max_in_flight
        self.online_in_flight = online_in_flight
        self.engine_waiting = engine_waiting
        self.max_busy = None if capacity is None else max(1, capacity - 1)
        self.poll_s = poll_s
        self.running = 0
        self._freed = asyncio.Event()

    def _online_first(self) -> bool:
        online = self.online_in_flight()
        if self.max_busy is not None and self.running + online >= self.max_busy:
            return True
        return online > 0 and self.engine_waiting() > 0

    async def acquire(self) -> None:
        while True:
            full = self.running >= self.max_in_flight
            if not full and not self._online_first():
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
