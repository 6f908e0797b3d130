"""Free-form JSON objects never repeat a key (engine/structured/json_keys.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from thinkgate import SamplingParams, StructuredOutputsParams
from thinkgate.engine.structured.json_keys import KeyTracker, VocabIndex

PROMPT = ("<|im_start|>user\nDescribe it as JSON.<|im_end|>\n<|im_start|>assistant\n"
          "<think>\n\n</think>\n\n")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"repeated key in {pairs}"
    return dict(pairs)


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1', [', "a"', ',"a"']),                  # after a value: the next key
    ('{"a": 1, ', ['"a"']),                           # after the separator
    ('{"a": "x', ['", "a"', '","a"']),               # inside a string value
    ('{"ab": 1, "a', ['b"']),                         # a key being written
    ('{"ab": 1, "c', []),                             # no used key starts with c
    ('{"a": 1, "c": [{', []),                         # a new object has no keys yet
    ('{"a": {"b": 1}', [', "a"', ',"a"']),           # back in the outer object
    ('[1, "a', []),                                   # arrays have no keys
])
def test_forbidden_prefixes(text: str, expected: list[str]) -> None:
    tracker = KeyTracker()
    tracker.feed(text)
    assert sorted(tracker.forbidden_prefixes()) == sorted(expected)


def test_vocab_index_prefix_lookup() -> None:
    words = ["a", '"x"', '"x', '"xy"', 'x"', '"x": ']
    index = VocabIndex(lambda i: words[i], len(words))
    assert sorted(index.ids_starting_with('"x"')) == [1, 5]
    assert index.ids_starting_with("zz") == []


@pytest.mark.parametrize("so", [{"json_object": True},
                                {"json": {"type": "object", "properties": {"v": {}},
                                          "required": ["v"]}}])
def test_sampled_free_objects_have_distinct_keys(llm: Any, so: dict[str, Any]) -> None:
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=48,
                             structured_outputs=StructuredOutputsParams(
                                 **so, complete_before_max_tokens=True)) for i in range(8)]
    outs = llm.generate([PROMPT] * len(params), params, use_tqdm=False)
    for out in outs:
        json.loads(out.outputs[0].text, object_pairs_hook=_unique_pairs)


def test_a_copy_feeds_ahead_and_leaves_the_tracker_as_it_was() -> None:
    """Speculative drafts feed a copy (grammar.py's masks_along)."""
    tracker = KeyTracker()
    tracker.feed('{"a": 1, "b": {"c": [1, {"d')
    before = tracker.forbidden_prefixes()
    ahead = tracker.copy()
    ahead.feed('": 2}], "')
    assert ahead.forbidden_prefixes() == ('c"',)  # a key of the object "c" is in
    assert before == () and tracker.forbidden_prefixes() == () and tracker.in_string
    assert [frame.keys for frame in tracker.stack] == [{"a", "b"}, {"c"}, set(), set()]
    tracker.feed('": 2}], "')  # the original, fed the same text, agrees with the copy
    assert tracker.forbidden_prefixes() == ahead.forbidden_prefixes()
