"""What `parser_diff_vllm` needs per format beyond the markers: framing a model writes, the
vocabulary vLLM's parser looks up, Harmony's real token ids, vLLM's streamed result, and the
listed deliberate differences (parsers/README.md) the table counts apart from agreement.
"""

from __future__ import annotations

from typing import Any

# The answer wrapper a model writes after its thinking (reasoning-only runs): Cohere's response
# tokens, Hunyuan-A13B's `<answer>`, ERNIE's optional `<response>`. (open, close, how often)
ANSWER_WRAP: dict[str, tuple[str, str, float]] = {
    "cohere_command3": ("<|START_RESPONSE|>", "<|END_RESPONSE|>", 0.9),
    "cohere_command4": ("<|START_TEXT|>", "<|END_TEXT|>", 0.9),
    "hunyuan_a13b": ("<answer>\n", "\n</answer>", 1.0),
    "ernie45": ("<response>\n", "\n</response>\n", 0.5),
    **dict.fromkeys(("muse", "muse_glimmer", "musespark1x"),
                    ("<|start|>assistant to=user<|message|>", "<|eot|>", 1.0)),
}
# Whitespace a model's template always writes after the start and after the end marker.
FIXED_WS: dict[str, tuple[str, str]] = {
    "hunyuan_a13b": ("\n", "\n"),
    **dict.fromkeys(("muse", "muse_glimmer", "musespark1x"), ("", "")),  # messages back to back
}
# Plain vocabulary entries vLLM's parser looks up at construction (not special tokens).
EXTRA_VOCAB: dict[str, tuple[str, ...]] = {
    "olmo3": ("Ġ</", "</", "think", ">"),
    "poolside_v1": ("<assistant>",),
}
HARMONY = {"openai", "openai_gptoss"}
COHERE = {"cohere_command3", "cohere_command4"}


def cohere_actions(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Command A's action block as the model writes it: every call has its `tool_call_id`
    (Cohere's filter, which vLLM runs, skips an action without one)."""
    import json

    body = [{"tool_call_id": str(i), "tool_name": n, "parameters": a}
            for i, (n, a) in enumerate(calls)]
    return "<|START_ACTION|>" + json.dumps(body, ensure_ascii=False) + "<|END_ACTION|>"  # vLLM reads gpt-oss output from Harmony token ids


def thinking_kwargs(fmt: Any, seed: str) -> dict[str, Any]:
    """chat_template_kwargs for half the outputs of a format with a thinking switch: the
    setting that flips its default (`enable_thinking`, `thinking` or a `reasoning_effort`)."""
    import random

    if fmt is None or fmt.switch is None or random.Random(seed).random() < 0.5:
        return {}
    default = fmt.thinking_enabled({})
    tries = [{k: not default} for k in ("enable_thinking", "thinking")]
    tries += [{"reasoning_effort": e} for e in (("none", "no_think") if default else ("high",))]
    return next((ckw for ckw in tries if fmt.thinking_enabled(ckw) != default), {})


def harmony_ids(text: str) -> list[int]:
    from vllm.entrypoints.openai.parser.harmony_utils import get_encoding

    return list(get_encoding().encode(text, allowed_special="all"))


class HarmonyTokenizer:
    """gpt-oss's own vocabulary (o200k_harmony), for the Harmony parser's error recovery."""

    def __init__(self) -> None:
        from vllm.entrypoints.openai.parser.harmony_utils import get_encoding

        self.enc = get_encoding()
        self.all_special_tokens: list[str] = []
        self.init_kwargs: dict[str, Any] = {}
        self.chat_template = None

    def get_vocab(self) -> dict[str, int]:
        return {}

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        return harmony_ids(text)

    def decode(self, ids: Any, **_: Any) -> str:
        return self.enc.decode(list(ids))

    def convert_tokens_to_ids(self, token: Any) -> Any:
        ids = harmony_ids(token)
        return ids[0] if len(ids) == 1 else None


def harmony_text(tool: str | None, reasoning: str | None, thought: str | None, content: str,
                 calls_text: str) -> str:
    """A gpt-oss turn after the prompt's `<|start|>assistant`: analysis, then the calls
    (commentary to=functions.X) or the final answer."""
    msgs = []
    if thought is not None:
        msgs.append("<|channel|>analysis<|message|>" + thought + "<|end|>")
    if calls_text:
        if content:
            msgs.append("<|channel|>commentary<|message|>" + content + "<|end|>")
        msgs.append(calls_text)
    elif content:
        msgs.append("<|channel|>final<|message|>" + content + "<|return|>")
    text = "<|start|>assistant".join(m.removeprefix("<|start|>assistant") for m in msgs)
    return text


def vllm_stream(parser: Any, request: Any, tok: Any, text: str) -> tuple:
    """vLLM's streamed result: one token per delta, folded like a client would."""
    ids = tok.encode(text)
    reasoning, content, calls = [], [], {}
    for i, tid in enumerate(ids):
        d = parser.parse_delta(tok.decode([tid]), [tid], request, None,
                               finished=i == len(ids) - 1)
        if d is None:
            continue
        reasoning.append(d.reasoning or "")
        content.append(d.content or "")
        for tc in d.tool_calls or ():
            entry = calls.setdefault(tc.index, ["", ""])
            if tc.function is not None:
                entry[0] = tc.function.name or entry[0]
                entry[1] += tc.function.arguments or ""
    return ("".join(reasoning), "".join(content),
            [{"name": n, "arguments": a} for _, (n, a) in sorted(calls.items())])


def _only_markers(text: str, markers: tuple[str, ...]) -> bool:
    """`text` is markers back to back, the last one possibly cut off."""
    rest = text.strip()
    while rest:
        hit = next((m for m in markers if m and rest.startswith(m)), None)
        if hit is None:
            return any(m.startswith(rest) for m in markers)
        rest = rest[len(hit):].lstrip()
    return True


def listed_difference(name: str, text: str, ours: tuple, vllm: tuple,
                      vllm_streamed: tuple | None, end_markers: tuple[str, ...],
                      markers: tuple[str, ...] = ()) -> str | None:
    """The parsers/README.md row a disagreement falls under, or None (a real disagreement)."""
    if vllm_streamed is not None and vllm_streamed == ours:
        return "vLLM's streamed result (its non-streamed one differs)"
    r, c, calls = vllm
    if ours[2] == calls and ours[0] == r and ours[1] is None and c and _only_markers(c, markers):
        return "a header cut off at the end: vLLM returns its marker text as content"
    if (ours[1:] == vllm[1:] and r and ours[0] and r.startswith(ours[0])
            and r[len(ours[0]):].strip() == "<|start|>assistant"):
        return "Muse reasoning left without <|eom|>: vLLM keeps the next header's start in it"
    if c == text and not calls and any(m in text for m in markers) and ours != vllm:
        return "vLLM's non-streamed fallback returns the raw output, markers included, as content"
    if (ours[0] and ours[1] is None and not ours[2] and r is None and c and not calls
            and ours[0].strip() in c and not any(m.strip() in text for m in end_markers)):
        return "thinking cut off before its end marker: vLLM's non-streamed parse gives content"
    return None
