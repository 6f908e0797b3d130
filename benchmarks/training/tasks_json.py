"""JSON answers whose values come from the question ("Make a JSON record for Ana Silva, aged
34." -> {"name": "Ana Silva", "age": 34}).

The answer's keys vary (synonyms, order, a subset of what was said) so the model learns to put
the value that belongs to a key after it, whatever order a schema's grammar forces. `schema` is
the JSON schema of the answer and `expected` the values the question asked for, for held-out
checks under `response_format`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from thinkgate.benchmarks.training.task import Task, says
from thinkgate.benchmarks.training.values import CAPITALS, CITIES, Values

_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class _Field:
    keys: tuple[str, ...]
    draw: Callable[[Values], Any]
    mention: tuple[str, ...]  # how the question says it, "{}" = the value


_RECORDS: dict[str, tuple[tuple[str, ...], list[_Field]]] = {
    "person": (("Make a JSON record for {}", "Give me JSON for the person {}",
                "Fill in a JSON profile of {}", "As JSON, describe {}"), [
        _Field(("name", "full_name", "person"), Values.full_name, ("{}",)),
        _Field(("age", "years"), lambda v: v.integer(1, 99), ("aged {}", "age {}")),
        _Field(("email", "mail"), Values.email, ("email {}", "reachable at {}")),
        _Field(("city", "home_city", "location"), Values.city, ("from {}", "who lives in {}")),
    ]),
    "city": (("Tell me about {} as JSON", "Describe {} in JSON", "Give me a JSON object for "
              "the city {}", "JSON for the city {}"), [
        _Field(("city", "name"), Values.city, ("{}",)),
        _Field(("population", "people"), lambda v: v.integer(1000, 9999999),
               ("with {} people", "population {}")),
        _Field(("country",), lambda v: v._word(sorted(CAPITALS), 0.3, True), ("in {}",)),
    ]),
    "event": (("Create a JSON event {}", "Make a calendar entry as JSON: {}",
               "JSON for the event {}"), [
        _Field(("title", "name"), lambda v: v.phrase(1, 3), ("{}",)),
        _Field(("date", "day"), Values.date, ("on {}",)),
        _Field(("time", "start"), Values.clock, ("at {}",)),
        _Field(("location", "city", "place"), Values.city, ("in {}",)),
    ]),
    "file": (("Describe the file {} as JSON", "Give me JSON for the file {}",
              "JSON for {}"), [
        _Field(("path", "file"), Values.path, ("{}",)),
        _Field(("size", "bytes"), lambda v: v.integer(1, 99999), ("of {} bytes",)),
        _Field(("owner", "user"), Values.first_name, ("owned by {}",)),
    ]),
    "order": (("Write a JSON order for {}", "As JSON, an order of {}", "JSON for buying {}"), [
        _Field(("product", "item"), Values.word, ("{}",)),
        _Field(("quantity", "count"), lambda v: v.integer(1, 500), ("quantity {}", "times {}")),
        _Field(("price", "unit_price"), Values.amount, ("at {} each", "price {}")),
        _Field(("currency",), Values.currency, ("in {}",)),
    ]),
}


def _is_capital(city: str) -> bool | None:
    if city in CAPITALS.values():
        return True
    return False if city in CITIES else None


def json_task(v: Values, record: str | None = None) -> Task:
    r = v.rng
    record = record or r.choice(sorted(_RECORDS))
    leads, fields = _RECORDS[record]
    said = [fields[0]] + [f for f in fields[1:] if r.random() < 0.6]
    values = [f.draw(v) for f in said]
    phrases = [r.choice(f.mention).format(val) for f, val in zip(said, values)]
    user = r.choice(leads).format(phrases[0])
    if len(phrases) > 1:
        user += ", " + ", ".join(phrases[1:])
    user += r.choice([".", ".", "?", " please."])
    items = [(r.choice(f.keys), val) for f, val in zip(said, values)]
    items = list(dict((k, val) for k, val in items).items())  # "city" may come twice (person)
    if r.random() < 0.3:
        r.shuffle(items)
    if len(items) > 1 and r.random() < 0.2:
        items = r.sample(items, r.randint(1, len(items) - 1))
    answer = dict(items)
    expected = dict(answer)
    capital = _is_capital(values[0]) if record == "city" else None
    if capital is not None and r.random() < 0.5:
        answer[r.choice(["is_capital", "capital"])] = capital
    schema = {"type": "object", "properties": {k: {"type": _TYPES[type(x)]}
                                                for k, x in answer.items()},
              "required": list(answer), "additionalProperties": False}
    steps = [f"The user wants a JSON {record}."]
    steps += [f"The {k.replace('_', ' ')} is {x}." for k, x in expected.items()]
    if len(answer) > len(expected):
        steps.append(f"{values[0]} is {'' if capital else 'not '}a capital.")
    steps.append("I will write the JSON object.")
    return Task("json", user, steps, f"The user wants {values[0]} as JSON.",
                answer=json.dumps(answer), schema=schema, expected=expected,
                check=f"Let me check: {says(expected)}.")
