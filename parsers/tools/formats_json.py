"""Tool formats whose calls are JSON: a call object per marker, a JSON list, NAME + JSON args."""

from __future__ import annotations

from .spec import Header, Region, ToolSpec

_TC = Region(("<tool_call>",), "json_call", end=("</tool_call>",))

# Inkling's other block openers and its end-of-sampling closer: framing, not text
_INKLING_DROP = ("<|content_model_end_sampling|>", "<|content_invoke_tool_text|>",
                 "<|content_tool_error|>", "<|message_model|>", "<|content_text|>",
                 "<|end_message|>")

# Cohere writes an id in each call; its answer text sits in a response block
_COHERE = Region(("<|START_ACTION|>",), "json_list", end=("<|END_ACTION|>",),
                 name_keys=("tool_name", "name"), args_keys=("parameters", "arguments"),
                 id_key="tool_call_id")
_COHERE_DROP = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")

SPECS = [
    ToolSpec("hermes", (_TC,), "Hermes 2/3, Qwen2.5, QwQ", keep_ws=True),
    ToolSpec("qwen3_json", (_TC,), "Qwen2.5 / QwQ / Qwen3 (JSON tool calls)", keep_ws=True),
    ToolSpec("granite4", (_TC,), "IBM Granite 4", keep_ws=True, verbatim=True),
    # vLLM strips only the newlines between the text and the first call
    ToolSpec("ernie45", (_TC,), "Baidu ERNIE 4.5", keep_ws=True, keep_ws_trim="\n"),
    ToolSpec("longcat", (Region(("<longcat_tool_call>",), "json_call",
                               end=("</longcat_tool_call>",)),), "Meituan LongCat-Flash",
             keep_ws=True),
    ToolSpec("granite-20b-fc", (Region(("<function_call>",), "json_call"),),
             "granite-20b-functioncalling", keep_ws=True),
    ToolSpec("internlm", (Region(("<|action_start|><|plugin|>",), "json_call",
                                 end=("<|action_end|>",)),), "InternLM 2 / 2.5",
             extra_markers=("<|action_start|>", "<|plugin|>"), keep_ws=True),
    # GigaChat 3 writes `text<|message_sep|>\n\nfunction call<|role_sep|>\n{..}`, 3.1
    # `text<|function_call|>{..}`: one call, then the end of the output
    # the EOS text `</s>` right after the call belongs to it (vLLM drops it there only)
    ToolSpec("gigachat3", (Region(("<|function_call|>", "function call<|role_sep|>"),
                                  "json_call", end=("</s>",)),), "GigaChat 3",
             extra_markers=("<|message_sep|>", "<|role_sep|>"),
             content_drop=("<|message_sep|>\n\n", "<|message_sep|>"),
             keep_ws=True),
    ToolSpec("inkling", (Region(("<|content_invoke_tool_json|>",), "json_call",
                                end=("<|end_message|>", "<|content_model_end_sampling|>"),
                                args_keys=("args", "arguments", "parameters", "tool_input")),),
             "Inkling", keep_ws=True, verbatim=True, content_drop=_INKLING_DROP, coerce_args=True),
    ToolSpec("llama3_json", (Region(("<|python_tag|>", "{"), "json_call", sep=";",
                                    render_sep=";", args_required=True, hold_args=True),),
             "Llama 3.1 / 3.2 / 3.3 (JSON)",
             # turn-end tokens written as text (a server that keeps special tokens)
             content_drop=("<|eot_id|>", "<|eom_id|>")),
    ToolSpec("llama4_json", (Region(("<|python_tag|>", "{"), "json_call", sep=";",
                                    render_sep=";"),), "Llama 4 (JSON)", anchored=("{",)),
    ToolSpec("jamba", (Region(("<tool_calls>",), "json_list", end=("</tool_calls>",)),),
             "AI21 Jamba", keep_ws=True),
    ToolSpec("hunyuan_a13b", (Region(("<tool_calls>",), "json_list", end=("</tool_calls>",)),),
             "Tencent Hunyuan-A13B", keep_ws=True),
    # a marker not followed by a call list is dropped, the text after it kept, and an empty
    # list with it (vLLM's engine)
    ToolSpec("granite", (Region(("<|tool_call|>", "<tool_call>"), "json_list",
                                bare_give_back=True, drop_empty_list=True),),
             "IBM Granite 3.0 / 3.1", coerce_args=True),
    ToolSpec("phi4_mini_json", (Region(("functools",), "json_list", args_required=True),),
             "Phi-4-mini",
             ends_reasoning=False),  # "functools" is a word a model may think about
    ToolSpec("apertus", (Region(("<|tools_prefix|>",), "json_list", end=("<|tools_suffix|>",),
                                single_key=True),), "Swiss AI Apertus", join="\n"),
    # vLLM's Cohere tool parsers split the thinking themselves: without a reasoning parser
    # named, the family's is used
    ToolSpec("cohere_command3", (_COHERE,), "Cohere Command R / R+", content_drop=_COHERE_DROP,
             verbatim=True, reasoning="cohere_command3"),
    ToolSpec("cohere_command4", (_COHERE,), "Cohere Command A", content_drop=_COHERE_DROP,
             verbatim=True, reasoning="cohere_command4"),
    ToolSpec("xlam", (
        Region(("```json",), "json_list", end=("```",)),
        Region(("[TOOL_CALLS]",), "json_list"),
        Region(("<tool_call>",), "json_list", end=("</tool_call>",)),
        Region(("[",), "json_list"),
    ), "Salesforce xLAM", anchored=("[",), anchor_after=("</think>",)),
    ToolSpec("mistral", (Region(("[TOOL_CALLS]",), "json_args", list_alt=True, bare_give_back=True,
                                nameless_calls=True,
                                header=Header(name_end=("[ARGS]", "[CALL_ID]"), name_stop=("{",),
                                              skip_to="[ARGS]", id_marker="[CALL_ID]")),),
             "Mistral / Mixtral / Devstral / Magistral", extra_markers=("[ARGS]", "[CALL_ID]"),
             coerce_args=True),
    ToolSpec("deepseek_v3", (Region(
        ("<｜tool▁calls▁begin｜>",), "json_args", end=("<｜tool▁calls▁end｜>",),
        call_begin=("<｜tool▁call▁begin｜>",), call_end=("<｜tool▁call▁end｜>",),
        header=Header(name_end=("\n",), name_stop=("{",),
                      strip_prefixes=("function<｜tool▁sep｜>",),
                      render="function<｜tool▁sep｜>{name}"),
        fence=True, after_body=("```",)),), "DeepSeek-V3, DeepSeek-R1",
        extra_markers=("<｜tool▁sep｜>",), keep_ws=True, verbatim=True),
    ToolSpec("deepseek_v31", (Region(
        ("<｜tool▁calls▁begin｜>",), "json_args", end=("<｜tool▁calls▁end｜>",),
        call_begin=("<｜tool▁call▁begin｜>",), call_end=("<｜tool▁call▁end｜>",),
        header=Header(name_end=("<｜tool▁sep｜>",))),), "DeepSeek-V3.1", keep_ws=True),
    ToolSpec("kimi_k2", (Region(
        ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"), "json_args",
        end=("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
        call_begin=("<|tool_call_begin|>",), call_end=("<|tool_call_end|>",),
        header=Header(name_end=("<|tool_call_argument_begin|>",), id_is_header=True,
                      render="functions.{name}:{index}"), strict_ids=True),),
        "Moonshot Kimi K2 / K2.5",
        keep_ws=True, coerce_args=True),
    ToolSpec("plamo3", (Region(
        ("<|plamo:begin_tool_requests:plamo|>",), "json_args",
        end=("<|plamo:end_tool_requests:plamo|>",),
        # a request's own begin marker may be missing: the name marker then opens the call
        call_begin=("<|plamo:begin_tool_request:plamo|>", "<|plamo:begin_tool_name:plamo|>"),
        call_end=("<|plamo:end_tool_request:plamo|>",),
        header=Header(name_end=("<|plamo:end_tool_name:plamo|>",),
                      strip_prefixes=("<|plamo:begin_tool_name:plamo|>",),
                      skip_to="<|plamo:begin_tool_arguments:plamo|>",
                      render="<|plamo:begin_tool_name:plamo|>{name}"),
        optional_prefixes=("<|plamo:constrain|>json<|plamo:msg|>",),
        after_body=("<|plamo:end_tool_arguments:plamo|>",)),), "PFN PLaMo 3",
        extra_markers=("<|plamo:constrain|>", "<|plamo:msg|>"), keep_ws=True, coerce_args=True),
    ToolSpec("openai", (Region(
        ("<|start|>assistant<|channel|>commentary to=functions.",
         "<|channel|>commentary to=functions.", "<|start|>assistant to=functions.",
         "to=functions.",
         # a bare recipient (`to=get_weather`, `to=math.sum`) in a commentary header
         "<|start|>assistant<|channel|>commentary to=", "<|channel|>commentary to=",
         "<|start|>assistant to="), "json_args",
        end=("<|call|>",),
        header=Header(name_end=(" ", "<|constrain|>", "<|message|>", "<|channel|>"),
                      skip_to="<|message|>", strip_prefixes=("functions.",),
                      render="{name} <|constrain|>json", render_end="")),), "OpenAI gpt-oss (Harmony)",
        extra_markers=("<|message|>", "<|constrain|>"), keep_ws=True, verbatim=True),
]
