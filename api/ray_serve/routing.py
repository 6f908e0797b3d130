"""Prefix-aware routing: a Ray Serve request router (`ray.serve.request_router.RequestRouter`)
that sends a prompt to the replica whose prefix cache already holds its longest prefix.

The ingress (`ingress.py`) computes a prompt's block hashes exactly as the engine's prefix cache
names its KV blocks (`engine/kv/prefix_cache.py`: a hash chained over each full block of
`block_size` token ids) and passes them with the call (`prefix_hashes=[...]`). `PrefixPolicy`
remembers which replica served which block hashes (bounded, least recently used forgotten) and
ranks the replicas for each request:

1. short prompts (fewer than `min_prefix_blocks` full blocks): power of two choices (two
   random replicas, Serve picks the shorter queue);
2. longer ones: the replica holding the longest run of the prompt's leading blocks (none held:
   any), ties to the least loaded, then at random; but only among replicas within the load
   bound: in flight + 1 at most `ceil(balance * (total in flight + 1) / replicas)` and at most
   `max_imbalance` above the least loaded one (consistent hashing with bounded loads; the least
   loaded replica is always within). A hot prefix therefore spills to a second replica instead
   of queueing on one; the spilled replica then holds it too.

`mode="round_robin"` turns the policy into plain round robin (the benchmark's baseline).
The rest (the queue-length probes, FIFO waiting, rejection and backoff, locality) is Serve's own.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from ray.serve.request_router import (
    LocalityMixin,
    MultiplexMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

MODES = ("prefix", "round_robin")


class PrefixPolicy:
    """Which replica served which block hashes, and the ranking of replicas for a request."""

    def __init__(self, *, mode: str = "prefix", min_prefix_blocks: int = 4,
                 balance: float = 1.5, max_imbalance: int = 4,
                 max_hashes: int = 200_000, seed: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
        if min_prefix_blocks < 1:
            raise ValueError(f"min_prefix_blocks must be >= 1, got {min_prefix_blocks}")
        if balance < 1.0:
            raise ValueError(f"balance must be >= 1.0, got {balance}")
        if max_imbalance < 1:
            raise ValueError(f"max_imbalance must be >= 1, got {max_imbalance}")
        if max_hashes < 1:
            raise ValueError(f"max_hashes must be >= 1, got {max_hashes}")
        self.mode = mode
        self.min_prefix_blocks = min_prefix_blocks
        self.balance = balance
        self.max_imbalance = max_imbalance
        self.max_hashes = max_hashes
        self.owners: OrderedDict[Any, set[Hashable]] = OrderedDict()  # hash → replicas, LRU
        self.in_flight: dict[Hashable, int] = {}
        self._placed: dict[str, Hashable] = {}  # request id → the replica counting it
        self._finished: set[str] = set()  # finished before Serve reported them sent
        self._sent: set[str] = set()
        self._turn = itertools.count()
        self._random = random.Random(seed)

    # what happened

    def routed(self, replica: Hashable, hashes: Sequence[Any]) -> None:
        """`replica` took a request with these block hashes (its cache will hold them)."""
        self.in_flight[replica] = self.in_flight.get(replica, 0) + 1
        for h in hashes:
            self.owners.setdefault(h, set()).add(replica)
            self.owners.move_to_end(h)
        while len(self.owners) > self.max_hashes:
            self.owners.popitem(last=False)

    def completed(self, replica: Hashable) -> None:
        if self.in_flight.get(replica, 0) > 0:
            self.in_flight[replica] -= 1

    def place(self, request: str, replica: Hashable, hashes: Sequence[Any],
              sent: bool = False) -> None:
        """Count `request` on `replica`: its first choice, then (`sent`) where Serve sent it,
        moved if they differ. A request reported finished before it was sent is not counted."""
        before = self._placed.get(request)
        if before is not None:
            self.completed(before)
        if request in self._finished:
            self._finished.discard(request)
            self._placed.pop(request, None)
            self.routed(replica, hashes)
            self.completed(replica)
            return
        self._placed[request] = replica
        if sent:
            self._sent.add(request)
        self.routed(replica, hashes)

    def finish(self, request: str) -> None:
        replica = self._placed.pop(request, None)
        if replica is not None:
            self.completed(replica)
        if request in self._sent:
            self._sent.discard(request)
        elif len(self._finished) < 100_000:  # Serve reports it sent after this (or retries)
            self._finished.add(request)

    def forget(self, replica: Hashable) -> None:
        """A replica left: its cache is gone with it."""
        self.in_flight.pop(replica, None)
        for owners in self.owners.values():
            owners.discard(replica)

    # the decision

    def matched_blocks(self, replica: Hashable, hashes: Sequence[Any]) -> int:
        n = 0
        for h in hashes:
            if replica not in self.owners.get(h, ()):
                break
            n += 1
        return n

    def rank(self, candidates: Sequence[Hashable],
             hashes: Sequence[Any] = ()) -> list[list[Hashable]]:
        """The candidates in ranks, most preferred first (Serve tries each rank in turn and
        takes the rank's replica with the shortest queue that accepts)."""
        if not candidates:
            return []
        if self.mode == "round_robin":
            start = next(self._turn) % len(candidates)
            ordered = list(candidates[start:]) + list(candidates[:start])
            return [[ordered[0]], ordered[1:]] if len(ordered) > 1 else [ordered]
        load = {r: self.in_flight.get(r, 0) for r in candidates}
        if len(hashes) >= self.min_prefix_blocks:
            bound = self.load_bound(load)
            within = [r for r in candidates if load[r] + 1 <= bound]
            matched = {r: self.matched_blocks(r, hashes) for r in within}
            best = [r for r in within if matched[r] == max(matched.values())]
            least = min(load[r] for r in best)
            chosen = self._random.choice([r for r in best if load[r] == least])
            rest = sorted((r for r in candidates if r != chosen), key=load.__getitem__)
            return [[chosen], rest] if rest else [[chosen]]
        return [self._random.sample(list(candidates), min(2, len(candidates)))]

    def load_bound(self, load: dict[Hashable, int]) -> int:
        """The most requests a replica may hold after taking one more, to be chosen for its
        cache: bounded above the mean and above the least loaded replica."""
        mean_bound = math.ceil(self.balance * (sum(load.values()) + 1) / len(load))
        return min(mean_bound, min(load.values()) + self.max_imbalance)


class PrefixAwareRouter(LocalityMixin, MultiplexMixin, RequestRouter):
    """Serve's request router over `PrefixPolicy`; reads the `prefix_hashes` (hex strings) and
    `avoid` (unique ids of replicas whose engine died) keyword arguments of the call."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.policy = PrefixPolicy(**kwargs)

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None,
                              ) -> list[list[RunningReplica]]:
        ids = self.apply_locality_routing(pending_request=pending_request) \
            if pending_request is not None else {r.replica_id for r in candidate_replicas}
        by_id = {r.replica_id: r for r in candidate_replicas if r.replica_id in ids}
        kwargs = pending_request.kwargs if pending_request is not None else {}
        avoid = set(kwargs.get("avoid") or ())
        usable = [i for i in by_id if i.unique_id not in avoid] or list(by_id)
        hashes = kwargs.get("prefix_hashes") or ()
        ranks = self.policy.rank(sorted(usable, key=lambda i: i.unique_id), hashes)
        if pending_request is not None and ranks and len(ranks[0]) == 1 and len(ranks) > 1:
            # counted now, so that requests chosen before this one is sent see its load
            self.policy.place(pending_request.metadata.internal_request_id, ranks[0][0],
                              hashes)
        return [[by_id[i] for i in rank] for rank in ranks if rank]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: Any) -> None:
        self.policy.place(pending_request.metadata.internal_request_id, replica_id,
                          pending_request.kwargs.get("prefix_hashes") or (), sent=True)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self.policy.finish(internal_request_id)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.policy.forget(replica_id)
