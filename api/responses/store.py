"""Stored responses for `GET /v1/responses/{id}`, `.../cancel` and `previous_response_id`.

In memory, bounded: past `max_size` entries the oldest is evicted first (`--responses-store-size`;
0 keeps nothing). Each entry holds the Response object and the chat messages of the conversation
that led to it (instructions excluded: OpenAI does not carry them over), so a follow-up turn
renders the whole history. A background response also holds its task, for cancel.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StoredResponse:
    response: dict[str, Any]
    messages: list[dict[str, Any]]  # the turn's input conversation, without instructions
    task: asyncio.Task[Any] | None = None  # a background response still running
    events: list[dict[str, Any]] | None = None  # a streamed background response's events
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def record(self, events: list[dict[str, Any]]) -> None:
        assert self.events is not None
        self.events += events
        self._changed.set()

    def done(self) -> None:
        """The background task ended (finished, failed or cancelled)."""
        self.task = None
        self._changed.set()

    async def replay(self, after: int = -1) -> AsyncIterator[dict[str, Any]]:
        """The recorded events after sequence number `after`, then the new ones as they come,
        until the background task ends."""
        assert self.events is not None
        i = after + 1
        while True:
            self._changed.clear()
            while i < len(self.events):
                yield self.events[i]
                i += 1
            if self.task is None:
                return
            await self._changed.wait()


class ResponseStore:
    """Responses by id, oldest evicted first past `max_size`."""

    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        self.max_size = max_size
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: StoredResponse) -> None:
        if self.max_size == 0:
            return
        key = entry.response["id"]
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_size:
            self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        return self._entries.get(response_id)

    def delete(self, response_id: str) -> StoredResponse | None:
        return self._entries.pop(response_id, None)
