"""Stored responses for `GET /v1/responses/{id}`, `.../cancel` and `previous_response_id`.

In memory, bounded: past `max_size` entries the oldest is evicted first (`--responses-store-size`;
0 keeps nothing). Each entry holds the Response object and the chat messages of the conversation
that led to it (instructions excluded: OpenAI does not carry them over), so a follow-up turn
renders the whole history. A background response also holds its task, for cancel.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class StoredResponse:
    response: dict[str, Any]
    messages: list[dict[str, Any]]  # the turn's input conversation, without instructions
    task: asyncio.Task[Any] | None = None  # a background response still running


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
