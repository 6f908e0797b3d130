"""Tool formats with XML-ish parameters, key/value tags, pythonic lists and Gemma's syntax."""

from __future__ import annotations

from .spec import Header, Region, ToolSpec
from .xml_body import ParamSyntax

# a `<parameter=` met inside a value ends it (a missing `</parameter>`, as vLLM reads it)
# `whole_numbers`: the formats vLLM 0.33 reads with its parser engine (`5.0` -> `5`)
QWEN_PARAM = ParamSyntax("<parameter=", ">", "</parameter>", open_closes=True, raw_key=True,
                         whole_numbers=True)
NAMED_PARAM = ParamSyntax("<parameter name=", ">", "</parameter>", whole_numbers=True)
KV = ParamSyntax("<arg_key>", "</arg_key>", "</arg_value>", value_open="<arg_value>",
                 trim_newline=False, whole_numbers=True)
_FN = Header(name_end=(">",), render="{name}")
_QFN = Header(name_end=(">",), render='"{name}"')  # `name="NAME">`, as the models write it


def _qwen(trim: bool = True) -> tuple[Region, ...]:
    params = QWEN_PARAM if trim else ParamSyntax("<parameter=", ">", "</parameter>",
                                                 trim_newline=False, open_closes=True,
                                                 raw_key=True, whole_numbers=True)
    # a name with no `>` ends at `</function>` (`<function=bad\n</function>`: a call `bad`)
    header = Header(name_end=(">",), name_stop=("</function>",))
    return (
        Region(("<tool_call>",), "xml", end=("</tool_call>",), call_begin=("<function=",),
               header=header, params=params, call_close="</function>", render_args="xml"),
        # the opening `<tool_call>` left out: the `</tool_call>` after the call is dropped
        Region(("<function=",), "xml", end=("</tool_call>",), header=header, params=params,
               call_close="</function>", render_args="xml"),
    )


def _invoke(begin: str, end: str, call_begin: str, param: ParamSyntax, call_close: str,
            header: Header = _QFN, **extra: bool) -> tuple[Region, ...]:
    return (Region((begin,), "xml", end=(end,), call_begin=(call_begin,), header=header,
                   params=param, call_close=call_close, render_args="xml", **extra),)


_SEED_PARAM = ParamSyntax("<parameter=", ">", "</parameter>", whole_numbers=True)
# a `<parameter name=` met inside a value ends it (a misspelled `</parameter>`, as vLLM reads it)
_MM2_PARAM = ParamSyntax("<parameter name=", ">", "</parameter>", trim_newline=False,
                         open_closes=True, close_call_closes=True, whole_numbers=True)
# a `<function=` inside a name ends that call (`<function=w<function=write>`: `w`, then `write`)
_SEED_FN = Header(name_end=(">",), name_stop=("<function=",), render="{name}")


def _atem(decode: str) -> tuple[Region, ...]:
    """Muse's ATEM calls: raw values (a string schema keeps them as written), converted by
    their schema otherwise, JSON-decoded when they have none;
    invoked in reasoning they are text (the reasoning parser's channels decide)."""
    param = ParamSyntax("<atem:parameter name=", ">", "</atem:parameter>", trim_newline=False,
                        decode=decode)
    return (Region(("<atem:function_calls>",), "xml", end=("</atem:function_calls>",),
                   call_begin=("<atem:invoke name=",), header=_QFN, params=param,
                   call_close="</atem:invoke>", render_args="xml", collapse_doubled=True),
            # an invoke written without its wrapper (or after a misspelled one): vLLM reads it
            Region(("<atem:invoke name=",), "xml", end=("</atem:function_calls>",),
                   header=_QFN, params=param, call_close="</atem:invoke>", render_args="xml",
                   collapse_doubled=True))


def _dsml(begins: tuple[str, ...], ends: tuple[str, ...], space: str = "",
          bare_invoke: bool = False) -> tuple[Region, ...]:
    d = "<｜DSML｜" + space
    param = ParamSyntax(d + 'parameter name=', ">", "</｜DSML｜" + space + "parameter>",
                        trim_newline=False, unwrap=("arguments", "input"), open_closes=True,
                        whole_numbers=True)
    close = "</｜DSML｜" + space + "invoke>"
    section = Region(begins, "xml", end=ends, call_begin=(d + "invoke name=",), header=_QFN,
                     params=param, call_close=close, render_args="xml")
    if not bare_invoke:
        return (section,)
    # the model may leave out the wrapper (DeepSeek-V4 at long context): an invoke alone is a
    # call, and a wrapper end after it is consumed
    return (section, Region((d + "invoke name=",), "xml", end=ends, header=_QFN, params=param,
                            call_close=close, render_args="xml"))


def _glm(name_end: tuple[str, ...], params: ParamSyntax = KV,
         drop_cut_off: bool = True) -> tuple[Region, ...]:
    """vLLM's GLM engine parsers drop a block cut off before its name ends, an empty one, and
    a call to a tool the request does not offer."""
    return (Region(("<tool_call>",), "xml", end=("</tool_call>",), params=params,
                   header=Header(name_end=name_end, name_stop=("<arg_key>",)),
                   render_args="xml", drop_cut_off=drop_cut_off, drop_unknown=drop_cut_off),)


_HY_KV = ParamSyntax("<arg_key>", "</arg_key>", "</arg_value>", value_open="<arg_value",
                     value_open_close=">", trim_newline=False)
_HY = Region(("<tool_calls>",), "xml", end=("</tool_calls>",), call_begin=("<tool_call>",),
             call_close="</tool_call>", header=Header(name_end=("<tool_sep>",)), params=_HY_KV,
             render_args="xml")
# Hunyuan 4 writes no <tool_sep>: the name runs up to the first <arg_key> (vLLM's hy_v4);
# a Hunyuan 3 style <tool_sep> is still read as the name's end
_HY4 = Region(("<tool_calls>",), "xml", end=("</tool_calls>",), call_begin=("<tool_call>",),
              call_close="</tool_call>",
              header=Header(name_end=("<tool_sep>",), name_stop=("<arg_key>", "</tool_call>"),
                            render_end=""),
              params=_HY_KV, render_args="xml")
_MM3 = "]<]minimax[>["
_PY = Region(("[",), "pythonic", render_args="pythonic")

SPECS = [
    ToolSpec("qwen3_coder", _qwen(), "Qwen3-Coder, Qwen3.5", engine="qwen3"),
    ToolSpec("qwen3_xml", _qwen(), "Qwen3 (XML tool calls)", engine="qwen3"),
    ToolSpec("step3p5", _qwen(), "StepFun Step-3.5"),
    ToolSpec("step5", _qwen(), "StepFun Step-5", keep_ws=True),
    ToolSpec("mimo", _qwen(trim=False), "Xiaomi MiMo", engine="qwen3"),
    # a call written without the wrapper (or after a misspelled one) is read too, and the
    # wrapper's end marker after it is dropped (vLLM's engine); in thinking only the wrapper
    # ends it
    ToolSpec("seed_oss", (*_invoke("<seed:tool_call>", "</seed:tool_call>", "<function=",
                                   _SEED_PARAM, "</function>", header=_SEED_FN),
                          Region(("<function=",), "xml", end=("</seed:tool_call>",),
                                 header=_SEED_FN,
                                 params=_SEED_PARAM, call_close="</function>",
                                 render_args="xml")),
             "ByteDance Seed-OSS", ends_reasoning_at=("<seed:tool_call>",)),
    # MiniMax writes values bare, and vLLM keeps a value's newlines: no newline framing
    ToolSpec("minimax_m2", (*_invoke("<minimax:tool_call>", "</minimax:tool_call>",
                                     "<invoke name=", _MM2_PARAM, "</invoke>", drop_unknown=True),
                            Region(("<invoke name=",), "xml", end=("</minimax:tool_call>",),
                                   header=_QFN, params=_MM2_PARAM, call_close="</invoke>",
                                   render_args="xml", drop_unknown=True)),
             "MiniMax-M2", ends_reasoning_at=("<minimax:tool_call>",)),
    # vLLM's dots parser: a call to a tool the request does not name is text; a block may
    # hold one JSON call object instead of invokes
    ToolSpec("dots", _invoke("<dots_function_call>", "</dots_function_call>", "<invoke name=",
                             NAMED_PARAM, "</invoke>", known_names=True, json_alt=True),
             "rednote dots.llm"),
    ToolSpec("step3", (Region(
        ("<｜tool_calls_begin｜>",), "xml", end=("<｜tool_calls_end｜>",),
        call_begin=("<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=",),
        call_end=("<｜tool_call_end｜>",), header=_QFN,
        params=ParamSyntax("<steptml:parameter name=", ">", "</steptml:parameter>",
                           trim_newline=False),
        call_close="</steptml:invoke>", render_args="xml"),), "StepFun Step-3", keep_ws=True),
    # the tokenizer may spell the space as "\u0120" or drop it ("<functionname=")
    ToolSpec("minicpm5", (Region(
        ("<function name=", "<function\u0120name=", "<functionname="), "xml", header=_QFN,
        params=ParamSyntax("<param name=", ">", "</param>", cdata=True, trim_newline=False,
                           open_alts=("<param\u0120name=", "<paramname=")),
        call_close="</function>", render_args="xml", known_names=True),), "MiniCPM 5"),
    # Muse messages keep their text as written around a tool channel (vLLM's muse parsers)
    ToolSpec("muse", _atem("json_unless_string"), "Muse Spark", ends_reasoning=False,
             keep_ws=True, verbatim=True),
    ToolSpec("musespark1x", _atem("json_unless_string"), "Muse Spark 1.x", ends_reasoning=False,
             keep_ws=True, verbatim=True),
    # vLLM's Glimmer JSON-decodes every value, a string-typed "12345" too: ours reads by schema
    ToolSpec("muse_glimmer", _atem("json_unless_string"), "Muse Glimmer", ends_reasoning=False,
             keep_ws=True, verbatim=True),
    ToolSpec("minimax_m3", (Region(
        (_MM3 + "<tool_call>",), "nested_xml", end=(_MM3 + "</tool_call>",),
        call_begin=(_MM3 + "<invoke name=",), header=_QFN, namespace=_MM3,
        call_close=_MM3 + "</invoke>", render_args="nested_xml"),), "MiniMax-M3",
        extra_markers=(_MM3,), keep_ws=True),
    ToolSpec("deepseek_v32", _dsml(("<｜DSML｜function_calls>",), ("</｜DSML｜function_calls>",)),
             "DeepSeek-V3.2", keep_ws=True),
    ToolSpec("deepseek_v4", _dsml(("<｜DSML｜tool_calls>", "<｜DSML｜function_calls>"),
                                  ("</｜DSML｜tool_calls>", "</｜DSML｜function_calls>"),
                                  bare_invoke=True), "DeepSeek-V4", keep_ws=True,
             ends_reasoning_at=("<｜DSML｜tool_calls>", "<｜DSML｜function_calls>")),
    ToolSpec("deepseek_v41", _dsml(("<｜DSML｜ calls>",), ("</｜DSML｜ calls>",), space=" "),
             "DeepSeek-V4.1", keep_ws=True),
    ToolSpec("kimi_k3", (Region(
        ("<|open|>tools<|sep|>",), "xml", end=("<|close|>tools<|sep|>",),
        call_begin=("<|open|>call",), header=Header(
            name_end=("<|sep|>",), attrs=True, render=' tool="{name}" index="{index}"'),
        params=ParamSyntax("<|open|>argument key=", "<|sep|>", "<|close|>argument<|sep|>",
                           trim_newline=False, typed_attr=True),
        call_close="<|close|>call<|sep|>", render_args="xml", drop_cut_off=True),), "Moonshot Kimi K3", keep_ws=True,
        content_drop=tuple(f"<|{tag}|>{sp}{what}{sp}<|sep|>" for tag in ("open", "close")
                           for sp in ("", " ") for what in ("response", "message")
                           if (tag, what) != ("open", "message"))),
    ToolSpec("glm45", _glm(("\n",)), "Zhipu GLM-4.5 / 4.6 / 4.7 / 5"),
    ToolSpec("glm47", _glm(("\n",)), "Zhipu GLM-4.7"),
    ToolSpec("ling3", _glm(("\n",)), "inclusionAI Ling 3"),
    # read by `poolside.PoolsideFormat` (a block at a time); the spec gives the markers, the
    # grammar and the renderer
    ToolSpec("poolside_v1", _glm(("\n",), ParamSyntax(
        "<arg_key>", "</arg_key>", "</arg_value>", value_open="<arg_value>", trim_newline=False,
        decode="json_unless_string"), drop_cut_off=False), "Poolside", keep_ws=True),
    ToolSpec("hy_v3", (_HY,), "Tencent Hunyuan 3", keep_ws=True),
    ToolSpec("hy_v4", (_HY4,), "Tencent Hunyuan 4 (typed value tags)", keep_ws=True),
    ToolSpec("k2_horizon", (Region(
        ("<ifm|tool_calls>",), "xml", end=("</ifm|tool_calls>",),
        call_begin=("<ifm|tool_call>",), call_close="</ifm|tool_call>",
        header=Header(name_stop=("<ifm|arg_key>", "</ifm|tool_call>")),
        params=ParamSyntax("<ifm|arg_key>", "</ifm|arg_key>", "</ifm|arg_value>",
                           value_open="<ifm|arg_value>", trim_newline=False,
                           whole_numbers=True),
        render_args="xml"),), "K2-Horizon", keep_ws=True),
    # some Gemma 4 checkpoints close a call with the turn's end, `<turn|>` (read as vLLM does)
    ToolSpec("gemma4", (Region(("<|tool_call>",), "gemma", end=("<tool_call|>", "<turn|>"),
                               header=Header(name_stop=("{",), strip_prefixes=("call:", ":"),
                                             render="call:{name}"),
                               string_delim='<|"|>', render_args="gemma"),), "Google Gemma 4",
             content_drop=("<turn|>",)),  # the turn's end is framing (vLLM drops its text)
    ToolSpec("functiongemma", (Region(("<start_function_call>",), "gemma",
                                      end=("<end_function_call>",),
                                      header=Header(name_stop=("{",), strip_prefixes=("call:",),
                                                    render="call:{name}"),
                                      string_delim="<escape>", render_args="gemma"),),
             "Google FunctionGemma"),
    ToolSpec("pythonic", (_PY,), "Llama 3.2 pythonic, ToolACE", anchored=("[",)),
    ToolSpec("llama4_pythonic", (Region(("<|python_start|>",), "pythonic",
                                        end=("<|python_end|>",), render_args="pythonic"), _PY),
             "Llama 4 (pythonic)", anchored=("[", "<|python_start|>")),
    ToolSpec("olmo3", (Region(("<function_calls>",), "pythonic", end=("</function_calls>",),
                              render_args="pythonic", render_sep="\n"),), "AllenAI OLMo 3"),
    ToolSpec("lfm2", (Region(("<|tool_call_start|>",), "pythonic", end=("<|tool_call_end|>",),
                             render_args="pythonic"),), "Liquid LFM2", join="\n"),
]
