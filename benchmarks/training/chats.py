"""Synthetic chats for the two bundled models, rendered from `Task`s.

`make_chat(rng, model, split)` draws one conversation: the messages up to the assistant's turn,
the tools, the chat-template switches, and the assistant's text. The demo model (`"demo"`)
thinks in one sentence; the reasoning model (`"reasoner"`) thinks in a sentence per step, in
fewer at `reasoning_effort` low, with a double-check at high, and sometimes has its thinking cut
mid-sentence by a forced `</think>` (what a thinking budget does) and answers anyway.
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass
from typing import Any

from thinkgate.benchmarks.training.task import Task
from thinkgate.benchmarks.training.tasks_json import json_task
from thinkgate.benchmarks.training.tasks_plain import copy_task, plain_task, short_json_task
from thinkgate.benchmarks.training.tasks_tools import TOOLS, forced_task, result_task, tool_task
from thinkgate.benchmarks.training.values import Values
from thinkgate.engine.demo.data import TOOLS as DEMO_TOOLS

MODELS = ("demo", "reasoner")
KINDS = ("tool", "json", "result", "plain", "copy", "short_json", "forced")
_WEIGHTS = {"demo": (33, 22, 14, 14, 12, 5, 3), "reasoner": (25, 20, 15, 28, 12, 3, 2)}
MIXES = ("v2", "v3", "v4")  # v2: the data v2 was trained on; v3, v4: the changes in make_chat
COMPACT_SHARE = 0.25  # tool answers written as a forced call's grammar writes them
JSON_TIGHT_PERCENT = 50  # (v3) JSON answers written as a response_format grammar writes them
_SYSTEMS = ["You are a helpful assistant.", "Be brief.", "You are a careful assistant.",
            "Answer the user."]
_PIECE = re.compile(r"\w+|\s+|[^\w\s]+")


@dataclass(frozen=True)
class Chat:
    """One conversation up to and including the assistant's turn."""

    messages: list[dict]
    tools: list[dict] | None
    template_kwargs: dict[str, Any]
    completion: str  # the assistant's text, without the closing <|im_end|>
    task: Task


def draw_task(v: Values, model: str, kind: str) -> Task:
    if kind == "tool":
        return tool_task(v)
    if kind == "json":
        return json_task(v)
    if kind == "result":
        return result_task(v)
    if kind == "copy":
        return copy_task(v)
    if kind == "short_json":
        return short_json_task(v)
    if kind == "forced":
        return forced_task(v)
    return plain_task(v, reasoning=model == "reasoner")


def reasoning_steps(task: Task, model: str, effort: str | None) -> list[str]:
    """The sentences of the task's reasoning for `model` at `effort` ("low", "high"; else
    medium): the first and last step at low, a double-check before the last at high."""
    if model == "demo":
        return [task.short]
    steps = task.steps
    if effort == "low" and len(steps) > 2:
        steps = [steps[0], steps[-1]]
    elif effort == "high" and task.check:
        steps = [*steps[:-1], task.check, steps[-1]]
    return list(steps)


def _reasoning(task: Task, model: str, effort: str | None) -> str:
    return " ".join(reasoning_steps(task, model, effort))


def _cut(text: str, rng: random.Random) -> str:
    """The reasoning up to a random piece boundary (where a thinking budget would end it)."""
    pieces = _PIECE.findall(text)
    return "".join(pieces[: rng.randint(1, max(1, len(pieces) - 1))])


def _effort(rng: random.Random) -> str | None:
    return rng.choices([None, "low", "medium", "high"], weights=[60, 15, 10, 15])[0]


def make_chat(rng: random.Random, model: str, split: str = "train",
              kind: str | None = None, weights: tuple[float, ...] | None = None,
              mix: str = "v2") -> Chat:
    """One chat for `model` ("demo" or "reasoner") with values of `split`; the kind is drawn
    with `weights` (one per KINDS entry; default the model's mixture) unless given.

    `mix` "v3" changes training chats only (held-out sets are the same under both): half of the
    JSON answers (by a hash of the question) and every grammar-shaped tool answer follow
    `</think>` with no blank line, as a `response_format` / forced-call grammar writes them;
    free-text tools are drawn more often, with a word more at most in their free text; two
    calls twice as often; a quarter of the tool lists are long (4-8 tools, often the demo's
    eight, as the playground offers them). `mix` "v4" is v3 with long tool lists for 60% of the
    tool requests: a long prompt is where the end of a copied free-text value was missed."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, not {model!r}")
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {MIXES}, not {mix!r}")
    v = Values(rng, split, mix)
    kind = kind or rng.choices(KINDS, weights=weights or _WEIGHTS[model])[0]
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    task = draw_task(v, model, kind)
    if task.kind == "tool" and rng.random() < COMPACT_SHARE:
        task.compact = True
    if v.v3 and (task.compact or (task.kind == "json" and zlib.crc32(task.user.encode())
                                  % 100 < JSON_TIGHT_PERCENT)):
        task.tight = True  # by a hash, not `rng`: the stream of chats stays as it was
    tools = task.tools
    if tools is None and rng.random() < 0.3:
        tools = [TOOLS[n] for n in rng.sample(sorted(TOOLS), rng.randint(1, 2))]
    messages = [{"role": "system", "content": rng.choice(_SYSTEMS)}] if rng.random() < 0.2 else []
    messages += [{"role": "user", "content": task.user}, *task.history]
    thinking = rng.random() < (0.8 if model == "demo" else 0.9)
    kwargs: dict[str, Any] = {"enable_thinking": thinking}
    effort = _effort(rng) if model == "reasoner" and thinking else None
    if effort is not None:
        kwargs["reasoning_effort"] = effort
    if not thinking:
        completion = task.body()
    else:
        reasoning = _reasoning(task, model, effort)
        if model == "reasoner" and rng.random() < 0.15:
            completion = f"<think>\n{_cut(reasoning, rng)}</think>{task.separator}{task.body()}"
        else:
            completion = f"<think>\n{reasoning}\n</think>{task.separator}{task.body()}"
    return Chat(messages, tools, kwargs, completion, task)


def heldout_chats(model: str, kind: str, n: int, seed: int = 1234) -> list[Chat]:
    """`n` chats of one kind whose values the models never saw in training."""
    rng = random.Random(f"{seed}-{model}-{kind}")
    return [make_chat(rng, model, "heldout", kind) for _ in range(n)]


def heldout_demo_tool_chats(n: int, seed: int = 1234) -> list[Chat]:
    """`n` held-out requests for one of the demo's eight tools with all eight offered, in the
    playground's order (what `LLM().chat(..., tools=...)` users and the playground send)."""
    rng = random.Random(f"{seed}-demo-tools8")
    chats = []
    for _ in range(n):
        task = tool_task(Values(rng, "heldout"), rng.choice(sorted(DEMO_TOOLS)))
        thinking = rng.random() < 0.8
        body = task.body()
        completion = f"<think>\n{task.short}\n</think>\n\n{body}" if thinking else body
        chats.append(Chat([{"role": "user", "content": task.user}], list(DEMO_TOOLS.values()),
                          {"enable_thinking": thinking}, completion, task))
    return chats
