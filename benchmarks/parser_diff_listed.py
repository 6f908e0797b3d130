"""The deliberate differences from vLLM (parsers/README.md) as checks on one harness case.

``parser_diff_vllm`` counts a disagreement as *listed* when one of these says it is a case the
README lists (ours keeps or completes what vLLM loses), and reports it apart from agreement.
Each check compares the two normalised results, ``(reasoning, content, calls)``; it accepts
nothing else: reasoning, and every call's name and arguments, must be equal unless the rule
is about them. Each label names its row of the README's "Deliberate differences" table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

Result = tuple[Any, Any, list]

# Tool parsers whose vLLM parser also drops the text before the calls (README: "text around a
# llama3_json call", minicpm5's "text around calls"); ours keeps it.
DROPS_TEXT_BEFORE = {"llama3_json", "llama4_json", "minicpm5", "phi4_mini_json", "olmo3"}


def _calls_equal(mine: Result, theirs: Result) -> bool:
    return bool(mine[2]) and mine[0] == theirs[0] and mine[2] == theirs[2]


def _text_after_calls(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """vLLM's content is ours less the text after its first call (between the calls, or the
    text the output ends with): most of vLLM's tool parsers return only the text before the
    first call."""
    if not _calls_equal(mine, theirs):
        return False
    a, b = mine[1] or "", (theirs[1] or "").rstrip()
    if not a.startswith(b):
        return False
    tail = a[len(b):].strip()
    # the text after the last call ends the output; text between calls is in it too
    return bool(tail) and (text.rstrip().endswith(tail)
                           or all(piece in text for piece in tail.split()))


def _text_before_calls(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """vLLM has no content where ours is the text before the first call (and after the
    last): the output starts with it."""
    if tool not in DROPS_TEXT_BEFORE or not _calls_equal(mine, theirs) or theirs[1]:
        return False
    a = (mine[1] or "").strip()
    head = a.split()[0] if a else ""
    return bool(head) and text.lstrip().startswith(head)


def _is_object(args: str) -> bool:
    return args.startswith("{")


def _arguments_not_an_object(tool: str | None, text: str, mine: Result,
                             theirs: Result) -> bool:
    """vLLM returns some call's arguments as something other than a JSON object (the text of
    a call cut off mid-arguments, Cohere's `{}` as `""`, JSON broken mid-value: `"back\\slash"`);
    ours are an object, the rest equal, or the content has the text after the point where the
    arguments stopped being JSON (ours end there, closed) added."""
    if mine[0] != theirs[0] or len(mine[2]) != len(theirs[2]):
        return False
    if mine[1] != theirs[1]:
        a, b = (mine[1] or "").strip(), (theirs[1] or "").strip()
        if not a.startswith(b) or a[len(b):].strip() not in text:
            return False
    differs = False
    for (name_a, args_a), (name_b, args_b) in zip(mine[2], theirs[2]):
        if name_a != name_b or not _is_object(args_a):
            return False
        if args_a != args_b:
            if _is_object(args_b):
                return False
            differs = True
    return differs


def _bracket_in_phi4_argument(tool: str | None, text: str, mine: Result,
                              theirs: Result) -> bool:
    """vLLM's phi4_mini_json takes the call list up to the first `]`, so a `]` inside an
    argument string loses every call (the output becomes content or nothing)."""
    if tool != "phi4_mini_json" or theirs[2] or not mine[2] or mine[0] != theirs[0]:
        return False
    return any("]" in args for _, args in mine[2])


# vLLM's functiongemma parser reads only `<escape>`-quoted values: a number, boolean or object
# argument is dropped from the call
# (README: "functiongemma number, boolean or object arguments"); minicpm5 drops a parameter
# its schema does not name (README: "minicpm5 parameter the schema does not name")
DROPS_UNQUOTED_ARGS = {"functiongemma", "minicpm5"}


def _arguments_dropped(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """Each of vLLM's calls has a subset of our call's arguments, with the same values."""
    if tool not in DROPS_UNQUOTED_ARGS or mine[0] != theirs[0] or mine[1] != theirs[1] \
            or len(mine[2]) != len(theirs[2]) or mine[2] == theirs[2]:
        return False
    for (name_a, args_a), (name_b, args_b) in zip(mine[2], theirs[2]):
        a, b = json.loads(args_a), json.loads(args_b)
        if name_a != name_b or not isinstance(a, dict) or not isinstance(b, dict) \
                or any(k not in a or a[k] != v for k, v in b.items()):
            return False
    return True


CHANNEL_FORMATS = {"muse", "muse_glimmer", "musespark1x", "openai_gptoss"}
CHANNEL_ROUTE = {"openai": "openai_gptoss"}  # a channel tool format's reasoning format


def _only_markers(text: str, markers: tuple[str, ...]) -> bool:
    """`text` is markers back to back, the last one possibly cut off."""
    rest = text.strip()
    while rest:
        hit = next((m for m in markers if m and rest.startswith(m)), None)
        if hit is None:
            return any(m.startswith(rest) for m in markers)
        rest = rest[len(hit):].lstrip()
    return True


def _header_cut_off(reasoning: str, text: str, mine: Result, theirs: Result,
                    ends: tuple[str, ...], markers: tuple[str, ...]) -> bool:
    """Muse/gpt-oss output cut inside a message header: vLLM's content is ours followed by
    the header's text (after a `\n` where it joins messages)."""
    r, c, calls = theirs
    a = mine[1] or ""
    return (reasoning in CHANNEL_FORMATS and mine[2] == calls and mine[0] == r
            and bool(c) and c.startswith(a) and bool(c[len(a):].strip())
            and text.rstrip().endswith(c[len(a):].strip()[-6:])
            and _only_markers(c[len(a):], markers))


# reasoning formats that drop a marker cut off at the output's end (`partial_marker_drop`)
DROPS_CUT_MARKER = {"plamo3", *CHANNEL_FORMATS}


def _cut_marker_kept(reasoning: str, text: str, mine: Result, theirs: Result,
                     ends: tuple[str, ...], markers: tuple[str, ...]) -> bool:
    """The output ends inside a marker (`..<|plamo:end_thin`): vLLM keeps the cut marker's
    text at the end of the reasoning or the content; ours drops it (PLaMo 3's own tests
    expect it dropped)."""
    if reasoning not in DROPS_CUT_MARKER or mine[2] != theirs[2]:
        return False
    for i in (0, 1):
        a, b = mine[i] or "", theirs[i] or ""
        if mine[1 - i] == theirs[1 - i] and len(b) > len(a) and b.startswith(a):
            cut = b[len(a):]
            return text.endswith(cut) and any(m.startswith(cut) and m != cut for m in markers)
    return False


def _muse_header_in_reasoning(reasoning: str, text: str, mine: Result, theirs: Result,
                              ends: tuple[str, ...], markers: tuple[str, ...]) -> bool:
    """muse_glimmer reasoning left without `<|eom|>`: vLLM keeps the next header's start."""
    r = theirs[0]
    return (reasoning.startswith("muse") and mine[1:] == theirs[1:] and bool(r)
            and bool(mine[0]) and r.startswith(mine[0])
            and r[len(mine[0]):].strip() == "<|start|>assistant")


def _raw_output_as_content(reasoning: str, text: str, mine: Result, theirs: Result,
                           ends: tuple[str, ...], markers: tuple[str, ...]) -> bool:
    """hunyuan_a13b cut inside `<answer>` (or without `</think>`): vLLM's regex fails and the
    whole output, markers included (less a closing `</answer>`), is its content."""
    raw = theirs[1] or ""
    return (reasoning == "hunyuan_a13b" and bool(raw) and text.startswith(raw) and not theirs[2]
            and any(m in raw for m in markers) and mine != theirs)


def _thinking_cut_off(reasoning: str, text: str, mine: Result, theirs: Result,
                      ends: tuple[str, ...], markers: tuple[str, ...]) -> bool:
    """Thinking cut off before its end marker: vLLM's non-streamed parse gives content."""
    r, c, calls = theirs
    return bool(mine[0] and mine[1] is None and not mine[2] and r is None and c and not calls
                and mine[0].strip() in c and not any(m.strip() in text for m in ends))


# vLLM's step3 returns an object-typed parameter as the JSON text the model wrote; ours keeps
# the type.
STRINGIFIES_VALUES = {"step3"}


def _as_strings(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _as_strings(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_as_strings(x) for x in v]
    return v if isinstance(v, str) else json.dumps(v)


def _stringified(v: Any, w: Any) -> bool:
    """``w`` is ``v`` with its non-string leaves as strings, or ``v``'s JSON text."""
    if _as_strings(v) == w:
        return True
    try:
        return isinstance(w, str) and json.loads(w) == v
    except ValueError:
        return False


def _each_value(mine: Result, theirs: Result, same: Callable[[Any, Any], bool]) -> bool:
    """The content and call names agree, and each argument value that differs, ours ``v``
    and vLLM's ``w``, is one where ``same(v, w)``."""
    if mine[0] != theirs[0] or mine[1] != theirs[1] or len(mine[2]) != len(theirs[2]) \
            or mine[2] == theirs[2]:
        return False
    for (name_a, args_a), (name_b, args_b) in zip(mine[2], theirs[2]):
        a, b = json.loads(args_a), json.loads(args_b)
        if name_a != name_b or not isinstance(a, dict) or not isinstance(b, dict) \
                or a.keys() != b.keys():
            return False
        if any(v != b[k] and not same(v, b[k]) for k, v in a.items()):
            return False
    return True


def _values_stringified(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """Each of vLLM's calls is ours with some non-string values written as strings."""
    return tool in STRINGIFIES_VALUES and _each_value(
        mine, theirs, lambda v, w: not isinstance(v, str) and _stringified(v, w))


def _strings_json_decoded(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """muse_glimmer, functiongemma: vLLM JSON-decodes a string value that reads as JSON
    (`12345`, a Glimmer value under a string schema, a FunctionGemma `<escape>`-quoted one);
    ours keeps the string."""
    return tool in ("muse_glimmer", "functiongemma") and _each_value(
        mine, theirs, lambda v, w: isinstance(v, str) and _stringified(w, v))


def _cut_argument_dropped(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """The output ends inside an argument's value: vLLM's last call lacks that argument (its
    other arguments and calls equal ours); ours keeps the value as written."""
    if mine[0] != theirs[0] or mine[1] != theirs[1] or len(mine[2]) != len(theirs[2]) \
            or not mine[2] or mine[2][:-1] != theirs[2][:-1]:
        return False
    (name_a, args_a), (name_b, args_b) = mine[2][-1], theirs[2][-1]
    a, b = json.loads(args_a), json.loads(args_b)
    if name_a != name_b or not isinstance(a, dict) or not isinstance(b, dict) or a == b:
        return False
    cut = [k for k in a if k not in b]
    return len(cut) == 1 and all(k in a and a[k] == v for k, v in b.items()) \
        and isinstance(a[cut[0]], str) \
        and a[cut[0]].rstrip()[-8:] in text.rstrip()[-24:]  # a cut end marker may follow


def _as_item_objects(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _as_item_objects(x) for k, x in v.items()}
    if isinstance(v, list):
        return {"item": [_as_item_objects(x) for x in v]}
    return v


def _item_lists(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """minimax_m3 writes a list as repeated `<item>` elements; where no schema types the value,
    vLLM reads it as an object `{"item": [...]}`, ours as the list."""
    if tool != "minimax_m3" or mine[0] != theirs[0] or mine[1] != theirs[1] \
            or len(mine[2]) != len(theirs[2]) or mine[2] == theirs[2]:
        return False
    return all(name_a == name_b and _as_item_objects(json.loads(args_a)) == json.loads(args_b)
               for (name_a, args_a), (name_b, args_b) in zip(mine[2], theirs[2]))


def _nameless_call(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """vLLM returns a call named "" (the output cut off inside the name); ours has no such
    call and keeps that text as content."""
    named = [c for c in theirs[2] if c[0]]
    return mine[0] == theirs[0] and len(named) < len(theirs[2]) and mine[2] == named \
        and bool(mine[1]) and text.rstrip().endswith(mine[1].rstrip()[-12:])


def _call_cut_in_name(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """The output ends inside a call's name: vLLM returns a call with the cut name (`p` for
    `ping`), ours no call, the text kept."""
    if mine[0] != theirs[0] or len(theirs[2]) != len(mine[2]) + 1 or theirs[2][:-1] != mine[2]:
        return False
    name = theirs[2][-1][0]
    return bool(name) and text.endswith(name) and (mine[1] or "").endswith(name)


_MUSE_TOOL_HEADER = re.compile(r"(?:<\|start\|>assistant\s*)?to=[\w.\-]+<\|message\|>")


def _muse_tool_header_kept(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """A Muse tool channel no call came of (its block cut off): vLLM keeps the channel's
    header (`to=ping<|message|>`) in the content, ours drops it as every Muse header; the
    rest equal."""
    if tool not in CHANNEL_FORMATS or mine[0] != theirs[0] or mine[2] != theirs[2]:
        return False
    return _MUSE_TOOL_HEADER.sub("", theirs[1] or "") == (mine[1] or "") != (theirs[1] or "")


RULES = {"text before the calls": _text_before_calls,  # before the broader "after" rule
         "text after the calls": _text_after_calls,
         "arguments not a JSON object in vLLM": _arguments_not_an_object,
         "a `]` in a phi4_mini_json argument": _bracket_in_phi4_argument,
         "arguments vLLM drops (functiongemma, minicpm5)": _arguments_dropped,
         "typed values vLLM returns as strings": _values_stringified,
         "string values vLLM JSON-decodes (muse_glimmer, functiongemma)": _strings_json_decoded,
         "the argument a call is cut off in, vLLM drops": _cut_argument_dropped,
         "minimax_m3 `<item>` lists vLLM reads as objects": _item_lists,
         "a call vLLM returns with no name": _nameless_call,
         "a call cut off inside its name": _call_cut_in_name,
         "a Muse tool channel's header vLLM keeps": _muse_tool_header_kept}


def _calls_vllm_drops(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """vLLM's calls are the first of ours, the rest equal: the last calls (cut off, or an end
    marker misspelled) are neither calls nor text in vLLM. Checked where both modes agree."""
    # the content may differ by the whitespace before the calls vLLM dropped (it keeps it)
    return mine[0] == theirs[0] and (mine[1] or "").rstrip() == (theirs[1] or "").rstrip() \
        and len(theirs[2]) < len(mine[2]) and mine[2][:len(theirs[2])] == theirs[2]


def _calls_vllm_returns_as_text(tool: str | None, text: str, mine: Result,
                                theirs: Result) -> bool:
    """vLLM's calls are the first of ours, and its content runs to the end of the output: the
    calls it could not read (one cut off or malformed) are text in vLLM, calls in ours."""
    if mine[0] != theirs[0] or len(theirs[2]) >= len(mine[2]) \
            or mine[2][:len(theirs[2])] != theirs[2]:
        return False
    a, b = (mine[1] or "").strip(), (theirs[1] or "").strip()
    return len(b) > len(a) and b.startswith(a) and text.rstrip().endswith(b[-12:])


def _malformed_block_vllm_drops(tool: str | None, text: str, mine: Result,
                                theirs: Result) -> bool:
    """The calls are equal, and vLLM's content is ours less a tail: a block whose markers are
    misspelled, which ours leaves as text (and what follows it), vLLM drops."""
    if tool is None or mine[0] != theirs[0] or mine[2] != theirs[2]:
        return False  # a tool format's block: not a rule for the reasoning names
    a, b = (mine[1] or "").strip(), (theirs[1] or "").strip()
    return len(a) > len(b) and a.startswith(b) and a[len(b):].strip() in text


def _broken_call_vllm_returns_as_text(tool: str | None, text: str, mine: Result,
                                      theirs: Result) -> bool:
    """JSON broken inside a call (a quote or brace dropped or added): vLLM returns the output
    from the block on as text; ours reads the calls before it and the broken call up to the
    break (arguments closed), and keeps the rest of the text as content."""
    if tool is None or mine[0] != theirs[0] or len(theirs[2]) >= len(mine[2]) \
            or mine[2][:len(theirs[2])] != theirs[2]:
        return False
    a, b = mine[1] or "", theirs[1] or ""
    if not b.strip() or not text.rstrip().endswith(b.rstrip()[-12:]):
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    rest = a[i:].strip()
    return (not rest or rest in text) and all(name and name in text for name, _ in mine[2])


def _within(small: str, big: str) -> bool:
    """`small` is `big` with characters taken out (a subsequence)."""
    rest = iter(big)
    return all(ch in rest for ch in small)


def vllm_loses_output(tool: str | None, text: str, mine: Result, theirs: Result) -> bool:
    """vLLM's result is ours with something the model wrote taken out, and nothing added: its
    calls are some of ours, in order (a call may lack some of ours' arguments), and its
    reasoning and content are ours less some text.
    What it lacks is in none of its fields (neither a call nor text): the user never sees
    it. Ours keeps it (a call, or text)."""
    if theirs[0] == "error" or mine == theirs:
        return False
    calls = iter(mine[2])
    return all(any(_args_within(c, m) for m in calls) for c in theirs[2]) \
        and _within(theirs[0] or "", mine[0] or "") and _within(theirs[1] or "", mine[1] or "")


def _args_within(theirs: tuple, mine: tuple) -> bool:
    """The same call, or vLLM's with some of ours' arguments taken out (the rest equal)."""
    if theirs == mine:
        return True
    if theirs[0] != mine[0]:
        return False
    try:
        a, b = json.loads(theirs[1]), json.loads(mine[1])
    except ValueError:
        return False
    return isinstance(a, dict) and isinstance(b, dict) and a.items() <= b.items()


# Rows about the argument values alone, which may come with a content row in one output.
VALUE_RULES = ("arguments vLLM drops (functiongemma, minicpm5)",
               "typed values vLLM returns as strings",
               "string values vLLM JSON-decodes (muse_glimmer, functiongemma)",
               "minimax_m3 `<item>` lists vLLM reads as objects")


# Checked only where vLLM's streamed and non-streamed results agree (both modes lose the call),
# where its stream sends nothing at all, or where its stream drops the calls and the text from
# the first of them on.
BOTH_MODES_RULES = {"calls vLLM drops in both modes": _calls_vllm_drops,
                    "calls vLLM returns as text in both modes": _calls_vllm_returns_as_text,
                    "a malformed block vLLM drops": _malformed_block_vllm_drops,
                    "JSON broken inside a call: vLLM returns the block as text":
                        _broken_call_vllm_returns_as_text}


_ERNIE_WRAPPER = ("\n\n<response>", "\n<response>", "<response>", "</response>\n", "</response>")


def _ernie_wrapper_kept(reasoning: str, text: str, mine: Result, theirs: Result,
                        ends: tuple[str, ...], markers: tuple[str, ...]) -> bool:
    """ERNIE 4.5's answer whose `<response>` / `</response>` pair is incomplete (one missing
    or misspelled): vLLM keeps the other tag in the content, ours drops it as framing (the
    content is vLLM's less that one tag); the rest equal."""
    if reasoning != "ernie45" or mine[0] != theirs[0] or mine[2] != theirs[2]:
        return False
    a, b = mine[1] or "", theirs[1] or ""
    return any(b.replace(tag, "", 1) == a for tag in _ERNIE_WRAPPER if tag in b)


# Rules for reasoning-only runs that need the format's markers (end markers, all markers).
MARKER_RULES = {"Muse/gpt-oss output cut inside a message header": _header_cut_off,
                "PLaMo 3 output cut inside a marker": _cut_marker_kept,
                "muse_glimmer reasoning left without `<|eom|>`": _muse_header_in_reasoning,
                "hunyuan_a13b output cut inside `<answer>`": _raw_output_as_content,
                "thinking cut off before its end marker": _thinking_cut_off,
                "ERNIE `<response>` wrapper with its pair incomplete": _ernie_wrapper_kept}


def listed_difference(tool: str | None, reasoning: str | None, text: str, mine: Result,
                      theirs: Result, stream: Result | None = None,
                      ends: tuple[str, ...] = (), markers: tuple[str, ...] = ()) -> str | None:
    """The README row this disagreement is, or None when it is not a listed one. ``stream``
    is vLLM's streamed result for the same text, where the caller has it; ``ends`` and
    ``markers`` are the format's reasoning end markers and all its markers."""
    for label, rule in RULES.items():
        if rule(tool, text, mine, theirs):
            return label
    for value_label in VALUE_RULES:
        if mine[1] != theirs[1] and RULES[value_label](tool, text, mine,
                                                       (theirs[0], mine[1], theirs[2])):
            # two listed differences at once: vLLM's argument values (one row), and its
            # content (another)
            both = listed_difference(tool, reasoning, text, mine,
                                     (theirs[0], theirs[1], mine[2]))
            if both is not None:
                return both + " + " + value_label
    lost = stream is not None and not stream[2] and (
        not stream[1] or (mine[1] or "").startswith(stream[1]))  # the calls never sent
    for label, rule in BOTH_MODES_RULES.items():
        if (stream == theirs or lost) and rule(tool, text, mine, theirs):
            return label
    if stream is not None and [c[0] for c in stream[2]] == [c[0] for c in mine[2]] \
            and _broken_call_vllm_returns_as_text(tool, text, mine, theirs):
        # its stream has sent these calls (arguments as cut or broken): ours too, closed
        return "JSON broken inside a call: vLLM returns the block as text"
    if stream is not None and (stream == mine or _arguments_not_an_object(tool, text, mine,
                                                                          stream)
                               or _values_stringified(tool, text, mine, stream)):
        # vLLM's two modes differ (a call cut off: its stream has sent the call, its
        # non-streamed parse returns the text); ours is the stream's, arguments closed
        return "vLLM's stream gives ours"
    for label, marker_rule in MARKER_RULES.items():  # rows about reasoning formats
        if tool is None and reasoning and marker_rule(reasoning, text, mine, theirs, ends,
                                                      markers):
            return label
    if tool in ("openai", *CHANNEL_FORMATS) and _header_cut_off(
            CHANNEL_ROUTE.get(tool, tool), text, mine, theirs, ends, markers):
        # a tool run of a channel format (read with its reasoning parser): the same row
        return "Muse/gpt-oss output cut inside a message header"
    if vllm_loses_output(tool, text, mine, theirs):  # the broadest row: checked last
        return "vLLM drops text or calls ours keeps"
    return None
