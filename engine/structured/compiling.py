"""Requests whose grammar is still compiling: parked outside the batch, never in the step loop.

`LLMEngine.add_request` asks the structured-output hook to `prefetch` a request's grammar (on a
worker thread, grammar_compile.py). A compile that finishes within `FAST_COMPILE_S` is
admitted at once, so a cached or quick grammar (and a quick compile error, raised to the caller
as before) costs no extra step. A slower one parks its request here; every step admits the
requests whose compile has ended and fails those past the deadline, while the others keep
decoding (vLLM parks them the same way, `WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`). An abort
while compiling drops the request; the compile itself runs on and lands in the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

FAST_COMPILE_S = 0.005  # how long add_request waits for a compile before parking the request


@dataclass
class Parked:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: Any  # SamplingParams
    future: Future[Any]
    deadline: float  # time.monotonic()


class CompilingRequests:
    """The parked requests, by id; `timeout_s`: how long a grammar may compile."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._parked: dict[str, Parked] = {}
        self._rejected: list[tuple[str, BaseException]] = []

    def __len__(self) -> int:
        return len(self._parked)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._parked

    @staticmethod
    def settled(future: Future[Any]) -> bool:
        """Whether the compile has ended (waiting up to FAST_COMPILE_S); re-raises its error."""
        if not future.done():
            wait([future], timeout=FAST_COMPILE_S)
        if not future.done():
            return False
        future.result()  # a compile error fails the request now, as a synchronous compile did
        return True

    def park(self, request_id: str, prompt: str | None, prompt_token_ids: list[int],
             params: Any, future: Future[Any]) -> None:
        self._parked[request_id] = Parked(request_id, prompt, prompt_token_ids, params, future,
                                          time.monotonic() + self.timeout_s)

    def request_ids(self) -> list[str]:
        return list(self._parked)

    def drop(self, request_id: str) -> bool:
        return self._parked.pop(request_id, None) is not None

    def admit_ended(self, admit: Callable[[str, str | None, list[int], Any], None]) -> None:
        """`admit(request_id, prompt, prompt_token_ids, params)` each request whose grammar is
        ready; those that fail (compile error, past the deadline, `admit` raising) wait in
        `take_rejected`."""
        ready, failed = self._ended()
        for parked in ready:
            try:
                admit(parked.request_id, parked.prompt, parked.prompt_token_ids, parked.params)
            except Exception as exc:  # e.g. max_tokens too small for the planned completion
                failed.append((parked.request_id, exc))
        self._rejected.extend(failed)

    def take_rejected(self) -> list[tuple[str, BaseException]]:
        rejected, self._rejected = self._rejected, []
        return rejected

    def _ended(self) -> tuple[list[Parked], list[tuple[str, BaseException]]]:
        """(requests whose grammar is ready, (request id, error) of those that failed or ran
        past the deadline); both leave the parking."""
        ready: list[Parked] = []
        failed: list[tuple[str, BaseException]] = []
        now = time.monotonic()
        for request_id, parked in list(self._parked.items()):
            if parked.future.done():
                del self._parked[request_id]
                error = parked.future.exception()
                if error is None:
                    ready.append(parked)
                else:
                    failed.append((request_id, error))
            elif now > parked.deadline:
                del self._parked[request_id]
                kind = parked.params.structured_outputs.kind
                failed.append((request_id, ValueError(
                    f"the structured_outputs {kind} constraint did not compile within "
                    f"{self.timeout_s:g} s (--structured-outputs-compile-timeout); simplify it "
                    "or raise the limit")))
        return ready, failed

    def wait_any(self, timeout_s: float) -> None:
        """Block until a parked compile ends, at most `timeout_s` (an idle batch waits here
        instead of spinning)."""
        if self._parked:
            wait([p.future for p in self._parked.values()], timeout=timeout_s,
                 return_when=FIRST_COMPLETED)
