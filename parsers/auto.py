"""`--tool-call-parser auto` / `--reasoning-parser auto`: vLLM parser names read off the markers
a model's chat template writes (and, where the template is silent, its special tokens).

    choice = choose_parsers(template_text, special_tokens)   # pure: text in, names out
    choice.tool_parser, choice.reasoning_parser              # vLLM names or None
    resolve_auto_parsers("auto", "auto", "path/to/model")    # reads the folder, logs the choice

Rules are data, most specific first; the first whose markers all occur wins. A reasoning format
whose thinking starts in the prompt (qwen3, deepseek_r1, ...) is chosen only where the template
itself opens thinking or has a thinking switch: an instruct model's template that merely strips
`<think>` from history must not turn every answer into reasoning.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

AUTO = "auto"


@dataclass(frozen=True)
class Rule:
    """`name` when every entry of `all_of` occurs in the searched text (an entry that is a tuple:
    any one of its strings); `where`: the whole template, or only its generation prompt (the text
    after the last `add_generation_prompt`)."""

    name: str
    all_of: tuple[str | tuple[str, ...], ...]
    where: str = "template"  # "template" | "generation"

    def matches(self, text: str) -> bool:
        return all((m in text) if isinstance(m, str) else any(x in text for x in m)
                   for m in self.all_of)

    def markers(self) -> tuple[str, ...]:
        return tuple(m if isinstance(m, str) else "/".join(m) for m in self.all_of)


# Tool-call formats. Fragments rather than whole markers where templates build a marker from
# variables (DeepSeek V3.2: `<{{ dsml_token }}function_calls>`).
TOOL_RULES: tuple[Rule, ...] = (
    Rule("openai", ("<|channel|>", "commentary", "functions.")),
    Rule("gemma4", ("<|tool_call>",)),
    Rule("mistral", ("[TOOL_CALLS]",)),
    Rule("kimi_k2", ("<|tool_calls_section_begin|>",)),
    Rule("deepseek_v4", ("｜DSML｜", ("｜DSML｜tool_calls", "}}tool_calls>"))),
    Rule("deepseek_v32", ("｜DSML｜", ("｜DSML｜function_calls", "}}function_calls>"))),
    Rule("deepseek_v3", ("<｜tool▁calls▁begin｜>", "```json")),
    Rule("deepseek_v31", ("<｜tool▁calls▁begin｜>",)),
    Rule("minimax_m2", ("<minimax:tool_call>",)),
    Rule("seed_oss", ("<seed:tool_call>",)),
    Rule("glm45", ("<tool_call>", "<arg_key>")),
    Rule("qwen3_coder", ("<tool_call>", "<function=")),
    Rule("granite", ("<|tool_call|>",)),
    Rule("phi4_mini_json", ("functools",)),
    Rule("lfm2", ("<|tool_call_start|>",)),
    Rule("apertus", ("<|tools_prefix|>",)),
    Rule("internlm", ("<|plugin|>",)),
    Rule("olmo3", ("<function_calls>",)),
    Rule("llama4_pythonic", ("<|header_start|>", "func_name1(")),
    Rule("llama4_json", ("<|header_start|>", "<|python_start|>")),
    Rule("pythonic", ("<|start_header_id|>", "func_name1(")),
    Rule("llama3_json", ("<|start_header_id|>", "ipython", "parameters")),
    Rule("hermes", ("<tool_call>",)),
)

# Reasoning formats. The prompt-opened ones (qwen3, deepseek_r1, deepseek_v3, ...) need the
# template to open thinking or to switch it; the others start as content and are safe.
REASONING_RULES: tuple[Rule, ...] = (
    Rule("openai_gptoss", ("<|channel|>", "analysis")),
    Rule("gemma4", ("<|channel>",)),
    Rule("mistral", ("[THINK]",)),
    Rule("seed_oss", ("<seed:think>",)),
    Rule("minimax_m2", ("]~b]ai", "<think>")),
    Rule("glm45", ("<think>", "<arg_key>")),
    Rule("kimi_k2", ("<think>", "<|tool_calls_section_begin|>")),
    # V3.1 / V3.2: a `thinking` / `enable_thinking` switch where the generation prompt is written
    Rule("deepseek_v3", ("<｜Assistant｜>", "think", "thinking"), where="generation"),
    Rule("hunyuan_a13b", ("<think>", "<answer>")),
    Rule("qwen3", ("<think>", "enable_thinking"), where="generation"),
    Rule("deepseek_r1", ("<think>",), where="generation"),
    Rule("granite", ("Here's my thought process",)),
    Rule("granite", ("Here is my thought process",)),
)

# Special tokens that name a format on their own, for templates that do not write the marker
# (Kimi K2 Instruct declares tools but renders no calls; Mistral's mistral-common templates).
TOOL_TOKEN_RULES: tuple[Rule, ...] = (
    Rule("mistral", ("[TOOL_CALLS]",)),
    Rule("kimi_k2", ("<|tool_calls_section_begin|>",)),
    Rule("minimax_m2", ("<minimax:tool_call>",)),
    Rule("seed_oss", ("<seed:tool_call>",)),
    Rule("lfm2", ("<|tool_call_start|>",)),
)
REASONING_TOKEN_RULES: tuple[Rule, ...] = (
    Rule("mistral", ("[THINK]",)),  # starts as content: harmless on a model that never thinks
)


@dataclass(frozen=True)
class AutoChoice:
    """Parser names chosen from a template, and the markers that decided them (for the log)."""

    tool_parser: str | None
    reasoning_parser: str | None
    tool_markers: tuple[str, ...] = ()
    reasoning_markers: tuple[str, ...] = ()


def _generation_prompt(template: str) -> str:
    at = template.rfind("add_generation_prompt")
    return template[at:] if at >= 0 else ""


def _first_match(rules: Iterable[Rule], template: str) -> Rule | None:
    generation = _generation_prompt(template)
    for rule in rules:
        text = generation if rule.where == "generation" else template
        if rule.matches(text):
            return rule
    return None


def _token_match(rules: Iterable[Rule], tokens: frozenset[str]) -> Rule | None:
    return next((r for r in rules if all(m in tokens for m in r.all_of)), None)


def choose_parsers(template: str | None, special_tokens: Iterable[str] = ()) -> AutoChoice:
    """The vLLM tool and reasoning parser names for a chat template (None: no format found)."""
    template = template or ""
    tokens = frozenset(special_tokens)
    tool = _first_match(TOOL_RULES, template) or _token_match(TOOL_TOKEN_RULES, tokens)
    reasoning = (_first_match(REASONING_RULES, template)
                 or _token_match(REASONING_TOKEN_RULES, tokens))
    return AutoChoice(tool.name if tool else None, reasoning.name if reasoning else None,
                      tool.markers() if tool else (), reasoning.markers() if reasoning else ())


def read_template_and_tokens(folder: str | Path) -> tuple[str | None, list[str]]:
    """A model folder's chat template text (every named template joined) and special tokens:
    `chat_template.jinja`, `chat_template.json`, `tokenizer_config.json`, `tokenizer.json`."""
    folder = Path(folder)
    if folder.is_file():  # a .gguf file: its folder may still hold the tokenizer files
        folder = folder.parent
    templates: list[str] = []
    tokens: list[str] = []
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        templates.append(jinja.read_text(encoding="utf-8"))
    for name in ("chat_template.json", "tokenizer_config.json"):
        data = _read_json(folder / name)
        templates.extend(_template_texts(data.get("chat_template")))
        tokens.extend(_token_texts(data))
    tokens.extend(_token_texts(_read_json(folder / "tokenizer.json")))
    return ("\n".join(templates) if templates else None), tokens


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("parser auto: could not read %s (%s)", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _template_texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        return [v["template"] for v in value
                if isinstance(v, dict) and isinstance(v.get("template"), str)]
    return []


def _token_texts(data: dict) -> list[str]:
    found: list[str] = []
    for entry in data.get("added_tokens", []) or []:  # tokenizer.json
        if isinstance(entry, dict) and isinstance(entry.get("content"), str):
            found.append(entry["content"])
    decoder = data.get("added_tokens_decoder") or {}  # tokenizer_config.json
    if isinstance(decoder, dict):
        found.extend(v["content"] for v in decoder.values()
                     if isinstance(v, dict) and isinstance(v.get("content"), str))
    for key in ("additional_special_tokens", "extra_special_tokens"):
        value = data.get(key)
        if isinstance(value, list):
            found.extend(v for v in value if isinstance(v, str))
    return found


def resolve_auto_parsers(tool_parser: str | None, reasoning_parser: str | None,
                         model: str | Path | None, chat_template: str | None = None
                         ) -> tuple[str | None, str | None]:
    """Replace each `"auto"` with the name read from the model's files (`chat_template`, when
    given, is the template to read instead of the folder's). Logs the choice; a format it cannot
    recognise becomes None with a warning. Names other than "auto" pass through unchanged."""
    if AUTO not in (tool_parser, reasoning_parser):
        return tool_parser, reasoning_parser
    template, tokens = read_template_and_tokens(model) if model is not None else (None, [])
    if chat_template is not None:
        template = chat_template
    choice = choose_parsers(template, tokens)
    source = f"the chat template of {model}" if template else f"{model} (no chat template found)"
    if tool_parser == AUTO:
        tool_parser = choice.tool_parser
        _log_choice("tool-call", tool_parser, choice.tool_markers, source)
    if reasoning_parser == AUTO:
        reasoning_parser = choice.reasoning_parser
        _log_choice("reasoning", reasoning_parser, choice.reasoning_markers, source)
    return tool_parser, reasoning_parser


def _log_choice(kind: str, name: str | None, markers: tuple[str, ...], source: str) -> None:
    if name is None:
        logger.warning("parser auto: no %s format recognised in %s; none is used (tool calls and "
                       "thinking stay plain content). Name one with --%s-parser.", kind, source,
                       "tool-call" if kind == "tool-call" else "reasoning")
    else:
        logger.info("parser auto: %s parser %r (%s writes %s)", kind, name, source,
                    ", ".join(repr(m) for m in markers))
