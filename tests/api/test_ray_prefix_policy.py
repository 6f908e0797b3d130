"""`PrefixPolicy` (api/ray_serve/routing.py) and `PrefixKeys` (prefix_key.py) without a cluster:
prefixes stick to the replica that served them, within the load bound; short prompts go to two
random replicas; round robin turns; the ingress's hashes are the engine's block hashes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray.serve", reason="the `ray-serve` extra is not installed")

from thinkgate.api.ray_serve.routing import PrefixPolicy  # noqa: E402

A, B, C = "a", "b", "c"


def blocks(tag: str, n: int) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_a_prefix_goes_back_to_the_replica_that_served_it() -> None:
    policy = PrefixPolicy(seed=0)
    policy.routed(B, blocks("p", 8))
    policy.completed(B)
    assert policy.rank([A, B, C], blocks("p", 8)) == [[B], [A, C]]
    # the longest match wins: C holds more of this prompt's leading blocks than B
    policy.routed(C, blocks("p", 10))
    policy.completed(C)
    assert policy.rank([A, B, C], blocks("p", 12))[0] == [C]
    # a prompt no replica has seen: the least loaded one (A)
    policy.routed(B, blocks("x", 8))
    policy.routed(C, blocks("y", 8))
    assert policy.rank([A, B, C], blocks("q", 8))[0] == [A]


def test_ties_go_to_the_less_loaded_replica() -> None:
    policy = PrefixPolicy(seed=0)
    for replica in (A, B):
        policy.routed(replica, blocks("p", 8))
    policy.routed(A, blocks("x", 8))  # A has one more in flight
    assert policy.rank([A, B], blocks("p", 8))[0] == [B]


def test_a_hot_prefix_spills_over_the_load_bound() -> None:
    policy = PrefixPolicy(balance=1.5, max_imbalance=4, seed=0)
    served = []
    for _ in range(16):  # 16 requests of one prefix, none finishing
        ranks = policy.rank([A, B], blocks("hot", 8))
        chosen = ranks[0][0] if len(ranks[0]) == 1 else min(ranks[0])
        policy.routed(chosen, blocks("hot", 8))
        served.append(chosen)
    counts = {r: served.count(r) for r in (A, B)}
    assert min(counts.values()) >= 4, counts  # never all on one replica
    assert max(counts.values()) - min(counts.values()) <= 4, counts


def test_short_prompts_take_power_of_two_choices() -> None:
    policy = PrefixPolicy(min_prefix_blocks=4, seed=1)
    policy.routed(A, blocks("p", 3))
    ranks = policy.rank([A, B, C], blocks("p", 3))  # 3 blocks < 4: no affinity
    assert len(ranks) == 1 and len(ranks[0]) == 2


def test_round_robin_turns_through_the_replicas() -> None:
    policy = PrefixPolicy(mode="round_robin")
    policy.routed(A, blocks("p", 8))
    firsts = [policy.rank([A, B, C], blocks("p", 8))[0][0] for _ in range(6)]
    assert firsts == [A, B, C, A, B, C]


def test_a_replica_that_left_is_forgotten_and_the_table_is_bounded() -> None:
    policy = PrefixPolicy(max_hashes=10, seed=0)
    policy.routed(A, blocks("p", 8))
    policy.forget(A)
    assert policy.matched_blocks(A, blocks("p", 8)) == 0
    policy.routed(B, blocks("q", 30))
    assert len(policy.owners) == 10
    assert policy.matched_blocks(B, blocks("q", 30)) == 0  # its first blocks were evicted


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "random"}, "mode must be one of"),
    ({"balance": 0.5}, "balance must be >= 1.0, got 0.5"),
    ({"max_imbalance": 0}, "max_imbalance must be >= 1, got 0"),
    ({"min_prefix_blocks": 0}, "min_prefix_blocks must be >= 1, got 0"),
])
def test_bad_options_are_named(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        PrefixPolicy(**kwargs)


def test_ingress_hashes_are_the_engine_prefix_cache_hashes() -> None:
    from thinkgate.api.chat import ChatLayer
    from thinkgate.api.ray_serve.prefix_key import PrefixKeys
    from thinkgate.engine.demo import demo_model_path
    from thinkgate.engine.kv.prefix_cache import chain_hash
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo_model_path())
    keys = PrefixKeys(ChatLayer(tokenizer), block_size=16)
    system = "You answer questions about the weather in short sentences. " * 20
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Rain?"}]
    ids = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer.encode(ids, add_special_tokens=False)
    expected, parent = [], None
    for i in range(len(ids) // 16):
        parent = chain_hash(parent, ids[i * 16:(i + 1) * 16])
        expected.append(parent.hex())
    body = json.dumps({"model": "m", "messages": messages}).encode()
    assert keys.hashes("/v1/chat/completions", body) == expected
    other = json.dumps({"model": "m", "messages": [messages[0], {"role": "user",
                                                                  "content": "Snow?"}]}).encode()
    shared = [a == b for a, b in zip(expected, keys.hashes("/v1/chat/completions", other))]
    assert sum(shared) >= len(expected) - 1 and shared[0]
    assert keys.hashes("/v1/chat/completions", b"not json") == []
    assert keys.hashes("/v1/completions", json.dumps({"prompt": ids}).encode()) == expected


def test_requests_are_counted_once_whatever_order_serve_reports_them() -> None:
    policy = PrefixPolicy(seed=0)
    # chosen (counted on A), sent to B instead, completed
    policy.place("r1", A, blocks("p", 8))
    policy.place("r1", B, blocks("p", 8), sent=True)
    assert policy.in_flight == {A: 0, B: 1}
    policy.finish("r1")
    # completed before Serve reported it sent: not counted again
    policy.place("r2", A, blocks("q", 8))
    policy.finish("r2")
    policy.place("r2", A, blocks("q", 8), sent=True)
    assert policy.in_flight == {A: 0, B: 0}
    assert not policy._finished and not policy._sent  # nothing kept for finished requests
    assert policy.matched_blocks(A, blocks("q", 8)) == 8  # yet A holds its blocks
    # concurrent new prefixes, each counted when chosen, alternate over the replicas
    chosen = []
    for i, tag in enumerate("wxyz"):
        replica = policy.rank([A, B], blocks(tag, 8))[0][0]
        policy.place(f"n{i}", replica, blocks(tag, 8))
        chosen.append(replica)
    assert sorted(chosen) == [A, A, B, B], chosen
