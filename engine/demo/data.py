"""Synthetic chats that teach the bundled demo model the Qwen3 + hermes format.

Every conversation is generated from a seeded `random.Random`, so the demo model can be rebuilt
bit for bit. Training uses the `train` value pools; tests draw held-out requests from the
`heldout` pools, so the model is checked on argument values it never saw.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": params}}


_S = {"type": "string"}
_I = {"type": "integer"}
_N = {"type": "number"}

TOOLS: dict[str, dict] = {t["function"]["name"]: t for t in [
    _fn("get_weather", "Get the current weather in a city",
        {"city": _S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    _fn("get_time", "Get the current time in a city", {"city": _S}, ["city"]),
    _fn("search_web", "Search the web", {"query": _S, "max_results": _I}, ["query"]),
    _fn("get_stock_price", "Get the latest stock price", {"ticker": _S}, ["ticker"]),
    _fn("convert_currency", "Convert an amount of money",
        {"amount": _N, "from_currency": _S, "to_currency": _S},
        ["amount", "from_currency", "to_currency"]),
    _fn("send_email", "Send an email", {"to": _S, "subject": _S, "body": _S},
        ["to", "subject", "body"]),
    _fn("set_alarm", "Set an alarm", {"time": _S, "label": _S}, ["time"]),
    _fn("translate_text", "Translate text", {"text": _S, "target_language": _S},
        ["text", "target_language"]),
]}

_POOLS = {
    "train": {
        "city": ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Lima", "Oslo", "Cairo",
                 "Delhi", "Sydney", "Toronto", "Chicago", "Vienna", "Dublin", "Seoul", "Boston"],
        "topic": ["python decorators", "black holes", "the french revolution", "sourdough bread",
                  "electric cars", "honey bees", "jazz history", "solar panels", "chess openings"],
        "ticker": ["AAPL", "MSFT", "GOOG", "AMZN", "TSLA", "NVDA", "IBM", "ORCL", "INTC"],
        "currency": ["USD", "EUR", "JPY", "GBP", "CHF", "CAD"],
        "person": ["alice@example.com", "bob@example.com", "carol@example.org", "dan@mail.com"],
        "subject": ["the meeting", "lunch", "the report", "the trip", "the budget"],
        "time": ["7:00", "6:30", "8:15", "9:45", "5:00", "10:20"],
        "label": ["work", "gym", "school", "flight"],
        "text": ["good morning", "thank you", "where is the station", "I like tea"],
        "language": ["French", "Spanish", "German", "Italian", "Japanese"],
    },
    "heldout": {
        "city": ["Lisbon", "Prague", "Nairobi", "Denver", "Hanoi", "Quito", "Athens", "Dallas"],
        "topic": ["coral reefs", "quantum computing", "roman roads", "tea ceremonies"],
        "ticker": ["META", "AMD", "SAP", "ADBE"],
        "currency": ["SEK", "INR", "AUD"],
        "person": ["erin@example.com", "frank@example.net"],
        "subject": ["the invoice", "the party"],
        "time": ["11:05", "4:40"],
        "label": ["dentist", "call mom"],
        "text": ["see you soon", "how much is this"],
        "language": ["Portuguese", "Dutch"],
    },
}

_CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid",
             "Germany": "Berlin", "Peru": "Lima", "Norway": "Oslo", "Egypt": "Cairo",
             "Kenya": "Nairobi", "Greece": "Athens", "Portugal": "Lisbon", "Austria": "Vienna"}


@dataclass(frozen=True)
class Example:
    """One training or evaluation chat: messages up to the assistant's turn, and that turn."""

    messages: list[dict]
    tools: list[dict] | None
    enable_thinking: bool
    completion: str           # the assistant's text, without the trailing <|im_end|>
    tool_name: str | None     # the tool the completion calls, if any


def _tool_request(rng: random.Random, pool: dict) -> tuple[str, str, dict, str]:
    """(tool name, user text, arguments, reasoning) for one tool-call request."""
    kind = rng.choice(list(TOOLS))
    p = {k: rng.choice(v) for k, v in pool.items()}
    if kind == "get_weather":
        user = rng.choice(["What's the weather in {city}?", "Is it raining in {city}?",
                           "How warm is it in {city} today?", "Weather for {city} please."])
        args: dict = {"city": p["city"]}
        if rng.random() < 0.3:
            args["unit"] = rng.choice(["celsius", "fahrenheit"])
            user += f" Use {args['unit']}."
        why = f"The user wants the weather in {p['city']}. I should call get_weather."
    elif kind == "get_time":
        user = rng.choice(["What time is it in {city}?", "Tell me the local time in {city}."])
        args, why = {"city": p["city"]}, f"The user asks for the time in {p['city']}."
    elif kind == "search_web":
        user = rng.choice(["Search the web for {topic}.", "Find articles about {topic}.",
                           "Look up {topic} online."])
        args = {"query": p["topic"]}
        if rng.random() < 0.4:
            args["max_results"] = rng.randint(1, 9)
            user += f" Show {args['max_results']} results."
        why = f"The user wants a web search about {p['topic']}."
    elif kind == "get_stock_price":
        user = rng.choice(["What is the stock price of {ticker}?", "How is {ticker} trading?"])
        args, why = {"ticker": p["ticker"]}, f"The user wants the price of {p['ticker']}."
    elif kind == "convert_currency":
        a, b = rng.sample(pool["currency"], 2)
        amount = rng.choice([5, 10, 20, 50, 100, 250, 12.5])
        user = f"Convert {amount} {a} to {b}."
        args = {"amount": amount, "from_currency": a, "to_currency": b}
        why = f"The user wants to convert {amount} {a} into {b}."
    elif kind == "send_email":
        user = "Email {person} about {subject}."
        args = {"to": p["person"], "subject": p["subject"].capitalize(),
                "body": f"Hi, a note about {p['subject']}."}
        why = f"The user wants to send an email to {p['person']}."
    elif kind == "set_alarm":
        user = rng.choice(["Set an alarm for {time}.", "Wake me up at {time}."])
        args = {"time": p["time"]}
        if rng.random() < 0.5:
            args["label"] = p["label"]
            user += f" Label it {p['label']}."
        why = f"The user wants an alarm at {p['time']}."
    else:
        user = "Translate '{text}' into {language}."
        args = {"text": p["text"], "target_language": p["language"]}
        why = f"The user wants '{p['text']}' in {p['language']}."
    return kind, user.format(**p), args, why + f" I will call {kind}."


def _plain_question(rng: random.Random) -> tuple[str, str, str]:
    """(user text, reasoning, answer) for a question that needs no tool."""
    r = rng.random()
    if r < 0.4:
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        return (f"What is {a} plus {b}?", f"The user asks for {a} plus {b}. That is {a + b}.",
                f"{a} plus {b} is {a + b}.")
    if r < 0.7:
        country, capital = rng.choice(list(_CAPITALS.items()))
        return (f"What is the capital of {country}?",
                f"The user asks about {country}. Its capital is {capital}.",
                f"The capital of {country} is {capital}.")
    greeting = rng.choice(["Hello!", "Hi there.", "Good morning!", "Hey, how are you?"])
    return (greeting, "The user is greeting me. I will greet them back.",
            "Hello! How can I help you today?")


def _call_text(name: str, args: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _with_thinking(reasoning: str, answer: str, enable_thinking: bool) -> str:
    return f"<think>\n{reasoning}\n</think>\n\n{answer}" if enable_thinking else answer


def _tool_list(rng: random.Random, must: str | None) -> list[dict]:
    names = rng.sample(sorted(TOOLS), rng.randint(1, 3))
    if must is not None and must not in names:
        names[rng.randrange(len(names))] = must
    return [TOOLS[n] for n in names]


def make_example(rng: random.Random, split: str = "train", kind: str | None = None) -> Example:
    """One synthetic chat. `kind` is "tool", "plain" or "result" (a tool result to answer)."""
    pool = _POOLS[split]
    kind = kind or rng.choices(["tool", "plain", "result"], weights=[5, 3, 2])[0]
    think = rng.random() < 0.8
    if kind == "plain":
        user, why, answer = _plain_question(rng)
        tools = _tool_list(rng, None) if rng.random() < 0.5 else None
        return Example([{"role": "user", "content": user}], tools, think,
                       _with_thinking(why, answer, think), None)
    name, user, args, why = _tool_request(rng, pool)
    tools = _tool_list(rng, name)
    messages = [{"role": "user", "content": user}]
    if kind == "tool":
        return Example(messages, tools, think, _with_thinking(why, _call_text(name, args), think),
                       name)
    result = {"status": "ok", "value": rng.randint(1, 99)}
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
        {"role": "tool", "content": json.dumps(result)},
    ]
    answer = f"Done. {name} returned {result['value']}."
    why = f"The tool {name} answered with {result['value']}. I will tell the user."
    return Example(messages, tools, think, _with_thinking(why, answer, think), None)


def heldout_tool_requests(n: int, seed: int = 1234) -> list[Example]:
    """`n` tool-call requests with argument values the demo model never saw in training."""
    rng = random.Random(seed)
    return [make_example(rng, "heldout", "tool") for _ in range(n)]
