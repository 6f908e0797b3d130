"""Incremental detokenization: equal to a full decode, stop strings held back and never leaked."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoints import make_tokenizer
from thinkgate.engine.core.detokenizer import IncrementalDetokenizer

TEXT = "Le café coûte 3€ — naïve résumé 日本語, the weather in Paris is sunny."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    return make_tokenizer(Path(tmp_path_factory.mktemp("tok")))


def run(tokenizer, ids: list[int], stop: list[str], include: bool = False):
    detok = IncrementalDetokenizer(tokenizer.backend_tokenizer, [], True, stop, include)
    deltas, hit = [], None
    for token in ids:
        detok.start_step()
        hit = detok.step(token)
        deltas.append(detok.new_text)
        if hit is not None:
            break
    if hit is None:
        detok.start_step()
        detok.flush()
        deltas.append(detok.new_text)
    return detok.text, deltas, hit


def test_incremental_text_equals_full_decode(tokenizer) -> None:
    ids = tokenizer.encode(TEXT)
    assert len(ids) > 20
    text, deltas, hit = run(tokenizer, ids, [])
    assert hit is None and text == TEXT == tokenizer.decode(ids)
    assert "".join(deltas) == TEXT
    assert all("\ufffd" not in d for d in deltas)  # split UTF-8 is never emitted half-done


@pytest.mark.parametrize("stop", ["Paris", "is sunny", "é 日", "€", "weather in P"])
def test_stop_string_ends_text_and_is_never_streamed(tokenizer, stop: str) -> None:
    ids = tokenizer.encode(TEXT)
    text, deltas, hit = run(tokenizer, ids, [stop, "zzz-not-there"])
    assert hit == stop
    assert text == TEXT[: TEXT.index(stop)]
    assert "".join(deltas) == text
    streamed = ""
    for delta in deltas:  # no prefix of the output ever contained the stop string
        streamed += delta
        assert stop not in streamed
    kept, _, _ = run(tokenizer, ids, [stop], include=True)
    assert kept == TEXT[: TEXT.index(stop) + len(stop)]


def test_held_back_text_is_released_when_the_stop_does_not_complete(tokenizer) -> None:
    ids = tokenizer.encode("the weather in Pa")
    text, deltas, hit = run(tokenizer, ids, ["Paris"])
    assert hit is None and text == "the weather in Pa"
    assert "".join(deltas[:-1]) == "the weather in "  # "Pa" waited for the flush
    assert deltas[-1] == "Pa"
