"""A reasoning format as data, plus what the engine needs from one (marker token ids, etc.).

Every reasoning parser is a `ReasoningFormat`: its markers and a few switches. The streaming
interpreter reads these fields; nothing here parses text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from thinkgate.parsers.markers import PatternMarker

Switch = Callable[[Mapping[str, Any]], bool]


def kwarg_switch(*names: str, default: bool = True) -> Switch:
    """Thinking is on unless one of `names` in chat_template_kwargs says otherwise.

    The first name present decides (`{"thinking": False}` turns DeepSeek-V3.1 off); with none
    present, `default`.
    """

    def enabled(ckw: Mapping[str, Any]) -> bool:
        for name in names:
            if name in ckw and ckw[name] is not None:
                return bool(ckw[name])
        return default

    return enabled


def any_kwarg_switch(*names: str) -> Switch:
    """Kimi's rule: on when any of `names` is true, or when none is given."""

    def enabled(ckw: Mapping[str, Any]) -> bool:
        given = [bool(ckw[n]) for n in names if ckw.get(n) is not None]
        return not given or any(given)

    return enabled


def all_switches(*switches: Switch) -> Switch:
    """On when every one of `switches` is on."""

    def enabled(ckw: Mapping[str, Any]) -> bool:
        return all(switch(ckw) for switch in switches)

    return enabled


def effort_switch(off: Sequence[str] = ("none",)) -> Switch:
    """On unless `reasoning_effort` (in chat_template_kwargs) is one of `off`."""

    def enabled(ckw: Mapping[str, Any]) -> bool:
        return str(ckw.get("reasoning_effort", "")).lower() not in off

    return enabled


def effort_given_switch(off: Sequence[str] = ("no_think",)) -> Switch:
    """On only when `reasoning_effort` is given and not one of `off` (Hunyuan 3: no effort
    means the template asked for no thinking)."""

    def enabled(ckw: Mapping[str, Any]) -> bool:
        effort = ckw.get("reasoning_effort")
        return bool(effort) and str(effort).lower() not in off

    return enabled


@dataclass(frozen=True)
class ReasoningFormat:
    """One model family's thinking syntax.

    start / end: marker spellings; the first of each is canonical (used for token ids).
    prefilled: the chat template opens thinking in the prompt, so output starts in reasoning.
        Otherwise output starts as content and a start marker opens reasoning.
    switch: chat_template_kwargs -> thinking on? Off makes the markers inert (all content).
    implicit_end: markers that end reasoning and are kept, re-read as content (tool sections).
    content_drop: markers removed from content (`</think>` duplicates, `<answer>` wrappers).
    reopen: whether a start marker in content opens reasoning again (default: not prefilled).
    reasoning_head: prefixes dropped from the start of each reasoning segment (Gemma's `thought`).
    content_prefix: text emitted before the first content (minimax_m2_append_think's `<think>`).
    force_content_kwarg: a chat_template_kwargs flag; when true and the output ends inside
        reasoning with no content, the reasoning is repeated as content (see README).
    turn_markers: prompt markers that begin a turn; `is_reasoning_end` scans back only to one.
    patterns: variable markers (`<think:high>`), each keyed as start or end via `pattern_roles`.
    discard: markers that open a channel whose text is dropped (Muse's `to=developer`); it ends
        at an end marker or where another channel starts.
    whitespace: what happens to whitespace next to the reasoning markers. "strip": dropped
        (README rule 4). "keep": stays where it was, as vLLM's marker-splitting parsers keep it
        (`<think> a </think>\nb` -> reasoning ` a `, content `\nb`). "trail": kept, except
        at the end of the reasoning (vLLM's engine parsers strip trailing reasoning whitespace).
        "rstrip": Cohere's filter: reasoning is stripped at both ends, every other piece of text
        loses the whitespace before a marker and at the end of the output, and keeps its leading
        whitespace (`<|END_THINKING|>\n<|START_RESPONSE|> Hi \n` -> content ` Hi`).
    drop: markers removed wherever they appear, thinking on or off (MiniCPM-V's reserved
        tokens and `<|im_end|>`).
    prefill_switch: chat_template_kwargs -> the template opened thinking in the prompt, for a
        format that is not `prefilled` otherwise (minimax_m3's `thinking_mode: enabled`).
    leading_drop: markers dropped at the very start of the answer only; later they are text
        (minimax_m3's `</mm:think>` closing an empty prefilled block).
    text_filter: a factory of streaming filters (`parsers/text_filters.py`) run over the
        reasoning text and, separately, the content text (MiniCPM-V's escaped newlines).
    after_end_strip: characters stripped from the start of the answer after an end marker (with
        thinking off, from the start of the output)
        (granite_thinking: its newlines, `</think>\n\n  Hi` -> `  Hi`).
    partial_marker_drop: at the end of the output, a trailing prefix of a marker at least this
        long is dropped (a marker cut off by the token limit); 0: kept as text.
    opening_ws_content: whitespace the output opens with, before its start marker, is content
        (vLLM's mistral, gemma4, minimax_m3: `\n[THINK]r[/THINK]c` -> content `\nc`).
    engine: the vLLM parser engine that reads this reasoning format together with a tool format
        naming the same engine (`qwen3`: with thinking off, that engine still drops the end
        marker from the answer: `a</think>b` -> `ab`).
    opening_ws_drop: whitespace the output opens with, before a start marker written in
        prefilled thinking, is dropped (vLLM's split at the first marker: deepseek_r1,
        `\n<think>r</think>c` -> reasoning `r`).
    """

    name: str
    start: tuple[str, ...] = ("<think>",)
    end: tuple[str, ...] = ("</think>",)
    prefilled: bool = True
    switch: Switch | None = None
    implicit_end: tuple[str, ...] = ()
    content_drop: tuple[str, ...] = ()
    reopen: bool | None = None
    reasoning_head: tuple[str, ...] = ()
    content_prefix: str = ""
    force_content_kwarg: str | None = None
    turn_markers: tuple[str, ...] = ()
    patterns: tuple[PatternMarker, ...] = ()
    pattern_roles: tuple[str, ...] = ()
    discard: tuple[str, ...] = ()
    whitespace: str = "strip"
    partial_marker_drop: int = 0
    after_end_strip: str = ""
    drop: tuple[str, ...] = ()
    text_filter: Callable[[], Any] | None = None
    prefill_switch: Switch | None = None
    leading_drop: tuple[str, ...] = ()
    opening_ws_content: bool = False
    opening_ws_drop: bool = False
    engine: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not self.end and not self.start:
            raise ValueError(f"reasoning format {self.name!r} has no start or end marker")
        if len(self.patterns) != len(self.pattern_roles):
            raise ValueError(f"reasoning format {self.name!r}: one role per pattern marker")
        if self.whitespace not in ("strip", "keep", "trail", "rstrip"):
            raise ValueError(f"whitespace {self.whitespace!r} is not 'strip', 'keep', 'trail' "
                             "or 'rstrip'")
        for role in self.pattern_roles:
            if role not in ("start", "end"):
                raise ValueError(f"pattern role {role!r} is not 'start' or 'end'")

    # ---- switches ----
    def thinking_enabled(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> bool:
        return self.switch is None or self.switch(chat_template_kwargs or {})

    def starts_in_reasoning(self, chat_template_kwargs: Mapping[str, Any] | None = None) -> bool:
        prefilled = self.prefilled or (self.prefill_switch is not None
                                       and self.prefill_switch(chat_template_kwargs or {}))
        return prefilled and self.thinking_enabled(chat_template_kwargs)

    @property
    def reopens(self) -> bool:
        return (not self.prefilled) if self.reopen is None else self.reopen

    # ---- what the engine needs (tokenizer: encode / convert_tokens_to_ids) ----
    def end_token_ids(self, tokenizer: Any) -> list[int]:
        """Token ids of the canonical end-of-thinking marker (one id when it is a special token)."""
        return marker_token_ids(tokenizer, self.end[0] if self.end else self.start[0])

    def start_token_ids(self, tokenizer: Any) -> list[int]:
        return marker_token_ids(tokenizer, self.start[0]) if self.start else []

    def is_reasoning_end(self, prompt_ids: Sequence[int], tokenizer: Any,
                         chat_template_kwargs: Mapping[str, Any] | None = None) -> bool:
        """True when generation after `prompt_ids` starts with thinking already over.

        Off by switch: True. Otherwise scan back through the last turn: an end marker before any
        start marker means the prompt closed thinking (e.g. Qwen3's empty `<think></think>`).
        """
        if not self.thinking_enabled(chat_template_kwargs):
            return True
        ends = [marker_token_ids(tokenizer, m) for m in self.end]
        starts = [marker_token_ids(tokenizer, m) for m in self.start]
        turns = [marker_token_ids(tokenizer, m) for m in self.turn_markers]
        ids = list(prompt_ids)
        for i in range(len(ids), 0, -1):
            if _ends_with(ids, i, ends):
                return True
            if _ends_with(ids, i, starts) or _ends_with(ids, i, turns):
                return False
        return False

    def count_reasoning_tokens(self, output_ids: Sequence[int], tokenizer: Any,
                               chat_template_kwargs: Mapping[str, Any] | None = None,
                               prompt_ended: bool = False) -> int:
        """Tokens of `output_ids` inside reasoning, markers excluded (for usage accounting)."""
        if not self.thinking_enabled(chat_template_kwargs):
            return 0
        ends = [marker_token_ids(tokenizer, m) for m in (*self.end, *self.implicit_end)]
        starts = [marker_token_ids(tokenizer, m) for m in self.start]
        inside = self.starts_in_reasoning(chat_template_kwargs) and not prompt_ended
        ids, count, i = list(output_ids), 0, 0
        while i < len(ids):
            hit = _starts_with(ids, i, ends if inside else starts)
            if hit:
                inside, i = not inside, i + hit
                continue
            if inside and _starts_with(ids, i, starts):
                i += _starts_with(ids, i, starts)
                continue
            count += inside
            i += 1
        return count


def marker_token_ids(tokenizer: Any, marker: str) -> list[int]:
    """A marker's token ids: its single id when it is a token of the vocabulary, else its
    encoding without special tokens."""
    if tokenizer is None:
        raise ValueError(f"a tokenizer is needed to find the token ids of {marker!r}")
    single = single_token_id(tokenizer, marker)
    if single is not None:
        return [single]
    return list(tokenizer.encode(marker, add_special_tokens=False))


def single_token_id(tokenizer: Any, marker: str) -> int | None:
    """The id of `marker` when it is one token, else None."""
    convert = getattr(tokenizer, "convert_tokens_to_ids", None)
    if convert is not None:
        tid = convert(marker)
        unk = getattr(tokenizer, "unk_token_id", None)
        if isinstance(tid, int) and tid >= 0 and (tid != unk or marker == getattr(
                tokenizer, "unk_token", None)):
            return tid
    encode = getattr(tokenizer, "encode", None)
    if encode is not None:
        ids = list(encode(marker, add_special_tokens=False))
        if len(ids) == 1:
            return int(ids[0])
    return None


def _ends_with(ids: list[int], i: int, seqs: list[list[int]]) -> bool:
    return any(seq and i >= len(seq) and ids[i - len(seq):i] == seq for seq in seqs)


def _starts_with(ids: list[int], i: int, seqs: list[list[int]]) -> int:
    for seq in seqs:
        if seq and ids[i:i + len(seq)] == seq:
            return len(seq)
    return 0
