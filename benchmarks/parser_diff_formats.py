"""What `parser_diff_vllm` needs per format: framing a model writes around its thinking, text
and calls, the stand-in tokenizers (markers, the vocabulary vLLM's parser looks up, Harmony's
real token ids) and vLLM's streamed result. (The listed deliberate differences:
`parser_diff_listed.py`.)
"""

from __future__ import annotations

from typing import Any

from thinkgate.parsers import get_parser

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
_MUSE = ("muse", "muse_glimmer", "musespark1x")

# Tool runs. What a real model writes around its calls where the plain generator would not be
# it: Cohere's text sits in a response block (`<|START_RESPONSE|>`, which vLLM's filter reads
# for every Command A model; Command A Reasoning may write `<|START_TEXT|>` instead, which our
# cohere_command4 tool parser does not strip yet); Muse writes channel-scoped messages
# (` to=self<|message|>..`): calls in a message to the tool, text to the user or as
# commentary (Glimmer has no commentary channel). (text before the calls, text after them),
# each (open, close).
_COHERE_FRAME = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
TEXT_FRAME: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    n: (_COHERE_FRAME, _COHERE_FRAME) for n in ("cohere_command3", "cohere_command4")}
for _n in _MUSE:
    _before = "user" if _n == "muse_glimmer" else "commentary"
    TEXT_FRAME[_n] = ((f"<|start|>assistant to={_before}<|message|>", "<|eom|>"),
                      ("<|start|>assistant to=user<|message|>", "<|eot|>"))
CALL_FRAME = {n: ("<|start|>assistant to={name}<|message|>", "<|eom|>") for n in _MUSE}
# The prompt already holds the first message's header; Harmony's is written by harmony_text.
PROMPT_PREFIX = {n: "<|start|>assistant " for n in _MUSE}
# vLLM always reads Harmony and Muse tool output with the family's reasoning parser too (ours
# is paired the same way).
PAIRED_REASONING = {"openai": "openai_gptoss", **{n: n for n in _MUSE}}
ENDS_AT_CALL = {"gigachat3"}  # GigaChat's one call ends the output
# Llama's pythonic calls are the whole message: vLLM reads a call list only as all the output.
CALLS_ONLY = {"pythonic", "llama4_pythonic"}
# InternLM 2 writes one action per message (vLLM's parser fails on a second); GigaChat one call.
MAX_CALLS = {"gigachat3": 1, "internlm": 1}


class CharTokenizer:
    """Enough of a HF tokenizer for both parsers: each marker one special token, else chars."""

    def __init__(self, markers: list[str], special: bool = True,
                 extra: tuple[str, ...] = ()) -> None:
        self.vocab = {m: 100_000 + i for i, m in enumerate(sorted(set(markers), key=len,
                                                                reverse=True))}
        self.ids = {v: k for k, v in self.vocab.items()}
        # plain entries a parser looks up (olmo3's `</`): in the vocabulary, never produced
        self.extra = {t: ord(t) + 1000 if len(t) == 1 else 150_000 + i
                      for i, t in enumerate(extra)}
        # vLLM's engine parsers drop the text of every special token their grammar does not
        # name; a marker that only our format lists (`]<]minimax[>[`, PLaMo's constrain tag)
        # is not one in the model's vocabulary, so tool runs declare none (`special=False`).
        self.all_special_tokens = list(self.vocab) if special else []
        self.all_special_ids = list(self.vocab.values()) if special else []
        self.init_kwargs: dict[str, Any] = {}
        self.chat_template = None
        self.unk_token_id = 0
        self.eos_token_id = 1
        self.vocab_size = 200_000

    def get_vocab(self) -> dict[str, int]:
        return {**self.extra, **self.vocab}

    def tokenize(self, text: str) -> list[str]:
        out, i = [], 0
        while i < len(text):
            for m in self.vocab:
                if text.startswith(m, i):
                    out.append(m)
                    i += len(m)
                    break
            else:
                out.append(text[i])
                i += 1
        return out

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        return [self.vocab.get(t, ord(t) + 1000 if len(t) == 1 else 0) for t in
                self.tokenize(text)]

    def decode(self, ids: Any, **_: Any) -> str:
        return "".join(self.ids.get(i, chr(i - 1000) if i >= 1000 else "") for i in ids)

    def convert_tokens_to_ids(self, token: Any) -> Any:
        if isinstance(token, list):
            return [self.convert_tokens_to_ids(t) for t in token]
        return self.vocab.get(token, self.unk_token_id)

    def convert_ids_to_tokens(self, ids: Any) -> Any:
        return [self.ids.get(i, chr(i - 1000)) for i in ids]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)


def markers_of(tool: str | None, reasoning: str | None) -> list[str]:
    p = get_parser(tool_parser=tool, reasoning_parser=reasoning)
    out: set[str] = set()
    if p.tool is not None:
        out |= set(p.tool.all_special_markers())
    if p.reasoning is not None:
        r = p.reasoning
        out |= {*r.start, *r.end, *r.implicit_end, *r.content_drop, *r.drop}
    # A real vocabulary holds no special token with whitespace in it (`<｜DSML｜invoke name=` is
    # plain text to DeepSeek's tokenizer); made one here, vLLM's lexer loses the text around it.
    return [m for m in out if len(m) > 1 and not any(c.isspace() for c in m)]


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
    """vLLM's streamed result: one token per delta, with a prompt-id list as its server passes
    one (empty: nothing in the prompt opens thinking), folded like an OpenAI client folds
    deltas (strings concatenated)."""
    if hasattr(parser, "adjust_request"):
        request = parser.adjust_request(request)
    ids = tok.encode(text)
    reasoning, content = [], []
    calls: dict[int, dict[str, str]] = {}
    for i, tid in enumerate(ids):
        d = parser.parse_delta(tok.decode([tid]), [tid], request, [],
                               finished=i == len(ids) - 1)
        if d is None:
            continue
        reasoning.append(getattr(d, "reasoning", None) or "")
        content.append(d.content or "")
        for tc in d.tool_calls or ():
            call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function is not None:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
    return "".join(reasoning), "".join(content), [calls[k] for k in sorted(calls)]
