"""What each marker does in each state: the role tables the interpreter scans with.

A format declares markers (`ReasoningFormat.start`/`end`/..., `ToolFormat.start_markers`/...);
`marker_roles` turns them into one table per scanning state and `marker_sets` compiles each
table into a `MarkerSet`. Roles: `end` (reasoning ends), `implicit` (reasoning ends and the
marker is read again as content), `start` (reasoning starts), `tool` (a tool section opens),
`drop` (the marker vanishes), `discard` (a dropped channel starts), `anchor` (text after which
anchored markers may open a section again). Tables: REASONING, "on" (content while thinking is
on), "off" (content with thinking switched off) and DISCARD (inside a dropped channel).
"""

from __future__ import annotations

from typing import Any

from thinkgate.parsers.markers import MarkerSet
from thinkgate.parsers.reasoning_format import ReasoningFormat, single_token_id
from thinkgate.parsers.types import ToolFormat

REASONING, CONTENT, TOOL = "reasoning", "content", "tool"
DISCARD = "discard"  # a channel whose text is dropped (Muse's `to=developer` messages)


def marker_roles(r: ReasoningFormat | None, tool: ToolFormat | None,
                 anchored: frozenset[str]) -> dict[str, dict[str, str]]:
    """marker -> role, per scanning state."""
    tool_starts = tool.start_markers if tool is not None else ()
    roles: dict[str, dict[str, str]] = {REASONING: {}, "on": {}, "off": {}}
    for m in tool_starts:
        roles["on"][m] = roles["off"][m] = "tool"
    for m in (tool.content_drop if tool is not None else ()):
        roles["on"].setdefault(m, "drop")
        roles["off"].setdefault(m, "drop")
    if r is not None:
        rr, con = roles[REASONING], roles["on"]
        for m in r.start:
            rr[m] = "drop"
        ends = tool_starts if tool and tool.ends_reasoning else ()
        if tool is not None and tool.reasoning_end_markers is not None:
            ends = tuple(m for m in ends if m in tool.reasoning_end_markers)
        for m in (*r.implicit_end, *(m for m in ends if m not in anchored)):
            rr[m] = "implicit"
        for m in r.end:
            rr[m] = "end"
        for m in r.content_drop:
            con.setdefault(m, "drop")
        if r.engine and tool is not None and getattr(tool, "engine", "") == r.engine:
            for m in r.end:  # one vLLM engine reads both: its end marker is framing, thinking off too
                roles["off"].setdefault(m, "drop")
        for m in r.discard:
            rr[m] = con[m] = "discard"
        for m in r.leading_drop:
            con[m] = "drop"
        for m in r.drop:
            rr.setdefault(m, "drop")
            con.setdefault(m, "drop")
            roles["off"].setdefault(m, "drop")
        if r.reopens:
            for m in r.start:
                con[m] = "start"
        for p, role in zip(r.patterns, r.pattern_roles):
            rr[p.key] = "drop" if role == "start" else "end"
            if role == "start" and r.reopens:
                con[p.key] = "start"
            elif role == "end":
                con.setdefault(p.key, "drop")
        # a discarded channel ends where content would resume or another channel starts
        after = {"drop": "end", "start": "start", "discard": "discard", "tool": "drop"}
        roles[DISCARD] = {m: after[role] for m, role in con.items()}
    for m in (tool.anchor_after if tool is not None else ()):
        # met in content: the anchored markers may open again
        roles["on"].setdefault(m, "anchor")
        roles["off"].setdefault(m, "anchor")
    return roles


def marker_sets(roles: dict[str, dict[str, str]], r: ReasoningFormat | None,
                anchored: frozenset[str]) -> tuple[dict[str, MarkerSet], dict[str, MarkerSet]]:
    """The scanners per state, and the content scanners once the answer has started (anchored
    markers are plain text there)."""
    pats = r.patterns if r is not None else ()
    sets = {
        REASONING: MarkerSet(roles[REASONING], pats),
        "on": MarkerSet(roles["on"], pats),
        "off": MarkerSet(roles["off"]),
    }
    if DISCARD in roles:
        sets[DISCARD] = MarkerSet(roles[DISCARD], pats)
    late = {k: sets[k] if not anchored else MarkerSet(
        [m for m in roles[k] if m not in anchored], pats if k == "on" else ())
        for k in ("on", "off")}
    return sets, late


def id_markers(tokenizer: Any, roles: dict[str, dict[str, str]],
               tool: ToolFormat | None) -> dict[int, str]:
    """token id -> marker, for every marker that is one token of `tokenizer`."""
    out: dict[int, str] = {}
    if tokenizer is None:
        return out
    markers = set(roles[REASONING]) | set(roles["on"])
    if tool is not None:
        markers |= set(tool.all_special_markers())
    for m in sorted(markers):
        tid = single_token_id(tokenizer, m)
        if tid is not None:
            out[tid] = m
    return out
