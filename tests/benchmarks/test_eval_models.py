"""eval_models' scores: a call counts only with the right tool and every argument value the
question gave; a JSON answer only when it validates and holds the asked-for values."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from thinkgate.benchmarks.eval_models import json_scores, result_scores, tool_scores
from thinkgate.benchmarks.training.chats import heldout_chats


def _out(content: str | None = None, calls: list[tuple[str, str]] | None = None):
    message = {"content": content}
    if calls:
        message["tool_calls"] = [{"function": {"name": n, "arguments": a}} for n, a in calls]
    return SimpleNamespace(message=message, finish_reason="stop")


def test_tool_scores_need_the_exact_values() -> None:
    chats = heldout_chats("demo", "tool", 4)
    want = [list(c.task.calls) for c in chats]
    outs = [
        _out(calls=[(n, json.dumps(a)) for n, a in want[0]]),
        _out(calls=[(n, json.dumps({k: f"{v}x" for k, v in a.items()})) for n, a in want[1]]),
        _out(content="no call"),
        _out(calls=[(n, "{not json") for n, _ in want[3]]),
    ]
    assert tool_scores(chats, outs) == {"right_tool": 2 / 4, "exact_args": 1 / 4}


def test_json_scores_need_valid_answers_with_the_asked_values() -> None:
    chats = heldout_chats("demo", "json", 3)
    right = json.loads(chats[0].task.body())
    wrong = json.loads(chats[1].task.body())
    key = next(iter(chats[1].task.expected))  # the same type, another value: still valid
    number = isinstance(wrong[key], (int, float)) and not isinstance(wrong[key], bool)
    wrong[key] = wrong[key] + 1 if number else f"{wrong[key]}x"
    outs = [_out(json.dumps(right)), _out(json.dumps(wrong)), _out('{"cut": ')]
    assert json_scores(chats, outs) == {"valid": 2 / 3, "asked_values": 1 / 3}


def test_result_scores_need_every_value_of_the_result() -> None:
    chats = heldout_chats("demo", "result", 2)
    outs = [_out(chats[0].task.answer), _out("Done.")]
    assert chats[1].task.expected["used"]  # the second answer misses real values
    assert result_scores(chats, outs) == {"uses_result": 1 / 2}


def test_heldout_seed_draws_the_sets_evaluate_runs(monkeypatch) -> None:
    """`--heldout-seed` reaches `evaluate` (the default, 1234, is the set the recorded figures
    used)."""
    from thinkgate.benchmarks import eval_models

    seen = []

    def fake_evaluate(name, folder, n, budgets, max_tokens, think_max_tokens, heldout_seed):
        seen.append(heldout_seed)
        raise SystemExit(0)  # no model load: only the argument's path is under test

    monkeypatch.setattr(eval_models, "evaluate", fake_evaluate)
    for argv, want in ((["--n", "2"], 1234), (["--n", "2", "--heldout-seed", "7"], 7)):
        with pytest.raises(SystemExit):
            eval_models.main(argv)
        assert seen[-1] == want


def test_every_set_of_evaluate_follows_the_heldout_seed(monkeypatch) -> None:
    """The demo's eight-tool set is drawn with the held-out seed too (it once ignored it, so
    its figures came out the same under every seed)."""
    from thinkgate.benchmarks import eval_models

    class Stop(Exception):
        pass

    drawn: dict[int, list] = {}

    class FakeLLM:
        def get_tokenizer(self):
            return None

    def fake_run(llm, chats, **kwargs):
        if chats and chats[0].tools and len(chats[0].tools) == 8 and \
                kwargs.get("tool_choice") == "required":
            drawn.setdefault(seed, []).append([c.task.user for c in chats])
            raise Stop
        return [None] * len(chats)

    monkeypatch.setattr(eval_models, "load", lambda folder: FakeLLM())
    monkeypatch.setattr(eval_models, "run", fake_run)
    monkeypatch.setattr(eval_models, "tool_scores", lambda chats, outs: {})
    for seed in (1234, 99):
        with pytest.raises(Stop):
            eval_models.evaluate("demo", "unused", 6, [], 64, heldout_seed=seed)
    assert drawn[1234] != drawn[99]
