"""The bundled models' synthetic training data: held-out values never reach training, every
chat renders through both chat templates, the reasoning model's thinking varies with the
request and with reasoning_effort."""

from __future__ import annotations

import json
import random

import pytest
from mask_walk import walks
from thinkgate.benchmarks.training.chats import KINDS, heldout_chats, make_chat
from thinkgate.benchmarks.training.task import call_text
from thinkgate.benchmarks.training.train import TEMPLATES
from thinkgate.benchmarks.training.values import Values, is_heldout


def _leaves(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    elif isinstance(x, list):
        for v in x:
            yield from _leaves(v)
    else:
        yield str(x)


@pytest.mark.parametrize("model", ["demo", "reasoner"])
def test_argument_values_split_by_hash(model):
    rng = random.Random(3)
    for _ in range(200):
        chat = make_chat(rng, model, "train", "tool")
        for _, args in chat.task.calls:
            assert not any(is_heldout(v) for v in args.values() if isinstance(v, str)), args
    for chat in heldout_chats(model, "tool", 50):
        for _, args in chat.task.calls:
            first = next(iter(args.values()))
            assert is_heldout(str(first)), args


def test_values_refuse_an_unknown_split():
    with pytest.raises(ValueError, match="'dev'"):
        Values(random.Random(0), "dev")
    with pytest.raises(ValueError, match="'tiny'"):
        make_chat(random.Random(0), "tiny")


@pytest.mark.parametrize("model", ["demo", "reasoner"])
def test_chats_render_and_answers_hold_the_question_values(model):
    from jinja2 import Environment

    template = Environment().from_string(TEMPLATES[model].read_text())
    rng = random.Random(11)
    for kind in KINDS:
        for _ in range(20):
            chat = make_chat(rng, model, "train", kind)
            prompt = template.render(messages=chat.messages, tools=chat.tools,
                                     add_generation_prompt=True, **chat.template_kwargs)
            assert prompt.endswith("<|im_start|>assistant\n" + (
                "" if chat.template_kwargs["enable_thinking"] else "<think>\n\n</think>\n\n"))
            assert chat.completion.endswith(chat.task.body())
            if kind == "tool":
                for name, args in chat.task.calls:
                    assert call_text(name, args, chat.task.compact) in chat.completion
                    assert all(str(v) in chat.task.user for v in args.values()
                               if not (name == "get_weather" and v in ("celsius",
                                                                       "fahrenheit")))
            if kind == "short_json":
                assert json.loads(chat.task.body()) == chat.task.expected
            if kind == "json":
                answer = json.loads(chat.task.body())
                assert all(str(v) in chat.task.user for v in chat.task.expected.values())
                assert set(chat.task.expected) <= set(answer) == set(chat.task.schema["required"])


def test_reasoner_template_renders_reasoning_effort():
    from jinja2 import Environment

    template = Environment().from_string(TEMPLATES["reasoner"].read_text())
    ask = [{"role": "user", "content": "Hi"}]
    assert "Reasoning effort" not in template.render(messages=ask, add_generation_prompt=True)
    low = template.render(messages=ask, add_generation_prompt=True, reasoning_effort="low")
    assert low.startswith("<|im_start|>system\nReasoning effort: low.<|im_end|>\n")
    high = template.render(messages=[{"role": "system", "content": "Be brief."}, *ask],
                           add_generation_prompt=True, reasoning_effort="xhigh")
    assert high.startswith("<|im_start|>system\nBe brief.\n\nReasoning effort: high.<|im_end|>")
    medium = template.render(messages=ask, add_generation_prompt=True, reasoning_effort="medium")
    assert medium == template.render(messages=ask, add_generation_prompt=True)


def test_reasoner_thinking_grows_with_the_request_and_effort():
    rng = random.Random(5)
    lengths: dict[str, list[int]] = {}
    for _ in range(400):
        chat = make_chat(rng, "reasoner", "train", "plain")
        if "</think>\n\n" not in chat.completion or "<think>" not in chat.completion:
            continue
        thought = chat.completion.split("</think>")[0]
        key = chat.template_kwargs.get("reasoning_effort") or "default"
        lengths.setdefault(key, []).append(len(thought.split()))
    mean = {k: sum(v) / len(v) for k, v in lengths.items()}
    assert mean["low"] < mean["default"] < mean["high"]
    assert max(lengths["default"]) >= 3 * min(lengths["default"])


def test_heldout_sets_are_seeded():
    a = heldout_chats("demo", "json", 5)
    b = heldout_chats("demo", "json", 5)
    assert [c.completion for c in a] == [c.completion for c in b]
    assert [c.completion for c in a] != [c.completion for c in heldout_chats("demo", "json", 5,
                                                                             seed=7)]


def test_compact_calls_are_what_a_forced_calls_grammar_writes():
    """A share of the tool answers is written as the hermes grammar of a forced call writes
    it (no newlines in the tags), so a forced call is not off the model's training text."""
    from thinkgate.parsers.tools.grammar import render_calls

    rng = random.Random(4)
    chats = [make_chat(rng, "demo", "train", "tool") for _ in range(200)]
    compact = [c for c in chats if c.task.compact]
    assert 20 < len(compact) < 80
    for chat in compact:
        assert chat.completion.endswith(render_calls("hermes", chat.task.calls))


def _goes_through(g, params, text: str, tok) -> bool:
    """Whether `text`, as the tokenizer splits it, passes the constraint's mask token by token
    from its first token on (where the grammar starts once thinking has ended)."""
    return walks(g, g.new_request(params), tok.encode(text, add_special_tokens=False))


def test_grammar_shaped_answers_follow_thinking_as_the_grammar_writes_them():
    """A `response_format` or `tool_choice=required` grammar starts right after `</think>` and
    forbids the template's blank line there: in the v3 mix, answers written as a grammar writes
    them follow `</think>` directly and go through the request's own mask; the others keep the
    blank line, which that mask refuses. The v2 mix keeps the blank line everywhere."""
    from thinkgate.engine.demo import demo_model_path
    from thinkgate.engine.sampling_params import StructuredOutputsParams
    from thinkgate.engine.structured import Grammar, tool_call_constraint
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_path())
    g = Grammar(tok, -(-len(tok) // 64) * 64, [tok.convert_tokens_to_ids("<|im_end|>")],
                max_num_seqs=1)
    rng = random.Random(6)
    chats = [make_chat(rng, "demo", "train", kind, mix="v3") for kind in ("json", "tool")
             for _ in range(40)]
    thinking = [c for c in chats if c.template_kwargs["enable_thinking"]]
    shaped = [c for c in thinking if c.task.tight]
    assert all(c.task.tight for c in thinking if c.task.compact)
    assert {c.task.kind for c in shaped} == {"json", "tool"}
    assert len(shaped) < len(thinking)
    try:
        for chat in shaped[:12]:
            after = chat.completion.split("</think>", 1)[1]
            if chat.task.kind == "json":
                params = StructuredOutputsParams(json=chat.task.schema)
            else:
                params = tool_call_constraint("hermes", chat.tools, "required")
            assert _goes_through(g, params, after, tok), chat.completion
            assert not _goes_through(g, params, "\n\n" + after, tok)
        for chat in thinking:
            if not chat.task.tight:
                assert chat.completion.split("</think>", 1)[1] == "\n\n" + chat.task.body()
    finally:
        g.close()
    rng = random.Random(6)
    for kind in ("json", "tool", "forced"):
        for _ in range(40):
            chat = make_chat(rng, "demo", "train", kind)
            assert "</think>" not in chat.completion or "</think>\n\n" in chat.completion


def test_heldout_tool_sets_draw_the_tools_alike():
    """The v3 mix draws the free-text tools more often in training; the held-out set does not."""
    from collections import Counter

    rng = random.Random(8)
    train = Counter(make_chat(rng, "demo", "train", "tool", mix="v3").task.calls[0][0]
                    for _ in range(600))
    held = Counter(c.task.calls[0][0] for c in heldout_chats("demo", "tool", 600))
    assert train["send_email"] > 2 * train["get_time"]
    assert held["send_email"] < 1.6 * held["get_time"] and held["get_time"] < 1.6 * held["send_email"]


def test_the_v3_mix_changes_training_chats_only():
    assert not Values(random.Random(0), "heldout", "v3").v3
    assert Values(random.Random(0), "train", "v3").v3
    for kind in KINDS:
        a = make_chat(random.Random(kind), "demo", "heldout", kind, mix="v2")
        b = make_chat(random.Random(kind), "demo", "heldout", kind, mix="v3")
        assert (a.messages, a.tools, a.completion) == (b.messages, b.tools, b.completion)
    with pytest.raises(ValueError, match="'v9'"):
        make_chat(random.Random(0), "demo", mix="v9")


def test_the_v3_mix_offers_long_tool_lists_and_the_demo_tools_as_the_playground_does():
    from thinkgate.engine.demo.data import TOOLS as DEMO_TOOLS

    rng = random.Random(9)
    sizes = {mix: [len(make_chat(rng, "demo", "train", "tool", mix=mix).tools)
                   for _ in range(300)] for mix in ("v2", "v3")}
    assert max(sizes["v2"]) <= 3
    assert 30 < sum(n >= 4 for n in sizes["v3"]) < 120
    eight = list(DEMO_TOOLS.values())
    v3 = [make_chat(rng, "demo", "train", "tool", mix="v3") for _ in range(300)]
    assert any(c.tools == eight for c in v3)
    for chat in v3:
        for name, _ in chat.task.calls:
            assert name in {t["function"]["name"] for t in chat.tools}


def test_the_eight_tool_heldout_set_offers_the_playground_tools():
    from thinkgate.benchmarks.training.chats import heldout_demo_tool_chats
    from thinkgate.engine.demo.data import TOOLS as DEMO_TOOLS

    chats = heldout_demo_tool_chats(60)
    assert len({c.task.user for c in chats}) > 50
    assert {c.task.calls[0][0] for c in chats} == set(DEMO_TOOLS)
    for chat in chats:
        assert chat.tools == list(DEMO_TOOLS.values())
        for _, args in chat.task.calls:
            assert is_heldout(str(next(iter(args.values())))), args


def test_the_v4_mix_offers_long_tool_lists_most_often_and_changes_training_only():
    rng = random.Random(10)
    long = {mix: sum(len(make_chat(rng, "demo", "train", "tool", mix=mix).tools) >= 4
                     for _ in range(300)) for mix in ("v3", "v4")}
    assert long["v4"] > 1.8 * long["v3"] and 150 < long["v4"] < 210
    assert Values(random.Random(0), "heldout", "v4").long_share == 0.0
    for kind in KINDS:
        a = make_chat(random.Random(kind), "demo", "heldout", kind, mix="v2")
        b = make_chat(random.Random(kind), "demo", "heldout", kind, mix="v4")
        assert (a.messages, a.tools, a.completion) == (b.messages, b.tools, b.completion)


def test_answer_weights_cover_what_follows_the_thinking():
    """`Batches(answer_weight=w)`: every label after the turn's `</think>` weighs w, the
    thinking 1; a turn without thinking (`enable_thinking: false`: the template closes it in
    the prompt) is all answer."""
    from pathlib import Path

    from thinkgate.benchmarks.training.batches import Batches
    from transformers import AutoTokenizer

    folder = Path(__file__).resolve().parents[2] / "engine" / "demo" / "model"
    tok = AutoTokenizer.from_pretrained(folder)
    end = tok.convert_tokens_to_ids("</think>")
    batches = Batches(tok, "demo", 8, seed=3, answer_weight=3.0)
    seen = set()
    for _ in range(6):
        ids, labels, mask, weight = batches.next()
        for row, lab, w in zip(ids.tolist(), labels.tolist(), weight.tolist()):
            answer = [i for i, x in enumerate(lab) if x != -100]
            turn = row[answer[0]:answer[-1] + 1]
            cut = answer[0] + (turn.index(end) + 1 if end in turn else 0)
            seen.add(end in turn)
            assert all(w[i] == 1.0 for i in answer if i < cut)
            assert all(w[i] == 3.0 for i in answer if i >= cut)
    assert seen == {True, False}


def test_the_weighted_loss_is_the_weighted_mean_of_the_token_losses():
    import torch
    import torch.nn.functional as F
    from thinkgate.benchmarks.training.train import loss_on_answers
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16)).eval()
    ids = torch.randint(0, 32, (2, 7))
    labels = ids.clone()
    labels[:, :3] = -100
    weight = torch.ones(2, 7)
    weight[:, 5:] = 4.0
    mask = torch.ones_like(ids)
    with torch.no_grad():
        plain, _ = loss_on_answers(model, ids, labels, mask)
        weighted, _ = loss_on_answers(model, ids, labels, mask, weight=weight)
        logits = model(ids).logits[:, :-1]
    each = F.cross_entropy(logits.reshape(-1, 32), ids[:, 1:].reshape(-1), reduction="none")
    keep = (labels[:, 1:] != -100).reshape(-1)
    w = weight[:, 1:].reshape(-1)[keep]
    assert torch.allclose(plain, each[keep].mean(), atol=1e-5)
    assert torch.allclose(weighted, (each[keep] * w).sum() / w.sum(), atol=1e-5)
    assert not torch.allclose(plain, weighted)
