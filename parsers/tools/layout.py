"""How a region writes calls: the one description the renderer and the grammar both follow.

A region is written as ``open`` + call (``sep`` call)* + ``close``; a call is
``begin`` + [index digits + ``after_index``] + arguments + ``end``. Formats whose region holds one
call (Hermes, Mistral, GLM) have an empty ``open``/``close`` and repeat the region per call.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import Region, ToolSpec


@dataclass(frozen=True)
class CallLayout:
    begin: str        # up to the index (or to the arguments when there is no index)
    has_index: bool   # Kimi-style call counters, written as digits
    after_index: str  # from the index to the arguments
    end: str


@dataclass(frozen=True)
class RegionLayout:
    region: Region
    open: str
    sep: str
    close: str
    trigger: str      # what starts a tool region in free text (auto mode)

    def call(self, name: str) -> CallLayout:
        r = self.region
        single = not self.open
        begin = (r.begin[0] if single else "") + (r.call_begin[0] if r.call_begin else "")
        pre = post = head_tail = ""
        has_index = False
        if r.body in ("json_call", "json_list"):
            keys = '"' + r.name_keys[0] + '": "' + name + '", "' + r.args_keys[0] + '": '
            if r.single_key:
                begin += '{"' + name + '": '
            elif r.id_key:  # Cohere: {"tool_call_id": "0", "tool_name": ..., "parameters": ...}
                begin += '{"' + r.id_key + '": "'
                has_index, head_tail = True, '", ' + keys
            else:
                begin += "{" + keys
            post = "}"
        elif r.body == "pythonic":
            begin += name + "("
            post = ")"
        if r.header is not None:
            h = r.header
            text = h.render.replace("{name}", name)
            end = h.render_end if h.render_end is not None else (h.name_end[0] if h.name_end
                                                                 else "")
            if "{index}" in text:
                has_index = True
                text, head_tail = text.split("{index}", 1)
                head_tail += end
            else:
                text += end
            begin += text
            if h.skip_to and end != h.skip_to:
                if has_index:
                    head_tail += h.skip_to
                else:
                    begin += h.skip_to
        if r.fence:
            pre, post = "```json\n", "\n```"
        elif r.after_body:
            post = r.after_body[0]
        if r.optional_prefixes:  # what the model writes before it: PLaMo's constrain header
            pre = r.optional_prefixes[0] + pre
        if has_index:
            head_tail += pre
        else:
            begin += pre
        end = post + r.call_close + (r.call_end[0] if r.call_end else "")
        if single:
            end += r.end[0] if r.end else ""
        return CallLayout(begin, has_index, head_tail, end)


def region_layout(spec: ToolSpec) -> RegionLayout:
    """The canonical way ``spec`` writes calls (its first region)."""
    r = spec.regions[0]
    b = r.begin[0]
    e = r.end[0] if r.end else ""
    if r.call_begin:
        return RegionLayout(r, b, "", e, b)
    if r.body == "json_list":
        return RegionLayout(r, b + "[", ", ", "]" + e, b)
    if r.body == "pythonic":
        if r.render_sep == "\n":
            return RegionLayout(r, b + "\n", "\n", "\n" + e, b)
        head = b if b == "[" else b + "["
        return RegionLayout(r, head, ", ", "]" + e, b)
    if r.sep:
        return RegionLayout(r, b, r.render_sep or r.sep, e, b)
    return RegionLayout(r, "", "\n" if r.body in ("json_call", "xml") else "", "", b)
