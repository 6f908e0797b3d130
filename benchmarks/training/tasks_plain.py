"""Requests answered in words: sums, chains of sums, comparisons, capitals, greetings.

The chains and comparisons are where the reasoning model's thinking grows with the question
(one sentence per step); the demo model answers them in one line.
"""

from __future__ import annotations

import json

from thinkgate.benchmarks.training.task import Task
from thinkgate.benchmarks.training.values import CAPITALS, Values, is_heldout

_GREETINGS = ["Hello!", "Hi there.", "Good morning!", "Hey, how are you?", "Hello! Who are you?",
              "Who are you?", "Hi! What can you do?", "Good evening.", "Say hello.", "Say hi.",
              "Please say hello.", "Greet me.", "Say hello to me.", "Hi!", "Hello there."]
_HELLOS = ["Hello! How can I help you today?", "Hello!", "Hi! How can I help?",
           "Hello there! What can I do for you?"]
_ME = "I am a small demo model. I can call tools and answer in JSON."


def _sum_chain(v: Values, terms: int) -> Task:
    r = v.rng
    nums = [r.randint(1, 20) for _ in range(terms)]
    ops = [r.choice("+-") for _ in range(terms - 1)]
    expr = str(nums[0]) + "".join(f" {o} {n}" for o, n in zip(ops, nums[1:]))
    said = expr  # "3 + 4" or "3 plus 4"
    if r.random() < 0.3:
        said = said.replace("+", "plus").replace("-", "minus")
    user = r.choice(["What is {}?", "Compute {}.", "How much is {}?"]).format(said)
    total, steps = nums[0], [f"I need to work out {expr}."]
    for i, (o, n) in enumerate(zip(ops, nums[1:])):
        new = total + n if o == "+" else total - n
        lead = "First" if i == 0 else "Then"
        steps.append(f"{lead}, {total} {o} {n} = {new}.")
        total = new
    steps.append(f"So the answer is {total}.")
    return Task("plain", user, steps, f"The user asks for {expr}. That is {total}.",
                answer=f"{expr} = {total}.", check=f"Let me check: the result is {total}.")


def _compare(v: Values) -> Task:
    r = v.rng
    digits = r.randint(1, 4)
    a = r.randint(10 ** (digits - 1), 10 ** digits - 1)
    b = r.randint(10 ** (digits - 1), 10 ** digits - 1) if r.random() < 0.7 else \
        r.randint(1, 10 ** r.randint(1, 4) - 1)
    while b == a:
        b += 1
    user = r.choice(["Which is larger, {} or {}?", "Is {} bigger than {}?",
                     "Which number is greater: {} or {}?"]).format(a, b)
    big = max(a, b)
    steps = [f"I compare {a} and {b}."]
    sa, sb = str(a), str(b)
    if len(sa) != len(sb):
        longer = a if len(sa) > len(sb) else b
        steps.append(f"{sa} has {len(sa)} digits and {sb} has {len(sb)} digits, "
                     f"so {longer} is larger.")
    else:
        for i, (x, y) in enumerate(zip(sa, sb)):
            place = ["first", "second", "third", "fourth"][i]
            if x == y:
                steps.append(f"The {place} digits are both {x}.")
            else:
                steps.append(f"The {place} digits are {x} and {y}, and {max(x, y)} is larger.")
                break
    steps.append(f"So {big} is larger.")
    return Task("plain", user, steps, f"I compare {a} and {b}. {big} is larger.",
                answer=f"{big} is larger.", check=f"Let me check: {big} is the larger one.")


def _capital(v: Values) -> Task:
    r = v.rng
    pairs = [(c, k) for c, k in CAPITALS.items() if is_heldout(c) == (v.split == "heldout")]
    country, capital = r.choice(pairs)
    user = r.choice(["What is the capital of {}?", "Name the capital of {}.",
                     "Which city is the capital of {}?"]).format(country)
    steps = [f"The user asks about {country}.", f"The capital of {country} is {capital}."]
    return Task("plain", user, steps, f"The user asks about {country}. Its capital is "
                f"{capital}.", answer=f"The capital of {country} is {capital}.")


def _greeting(v: Values) -> Task:
    user = v.rng.choice(_GREETINGS)
    if "who" in user.lower() or "what can" in user.lower():
        return Task("plain", user, ["The user asks who I am.", "I will introduce myself."],
                    "The user asks who I am.", answer=_ME)
    return Task("plain", user, ["The user is greeting me.", "I will greet them back."],
                "The user is greeting me. I will greet them back.",
                answer=v.rng.choice(_HELLOS))


def plain_task(v: Values, reasoning: bool) -> Task:
    """A request the demo model answers in one line; chains and comparisons grow the reasoning
    model's thinking."""
    r = v.rng.random()
    if r < 0.35:
        return _sum_chain(v, v.rng.randint(2, 5) if reasoning else 2)
    if r < 0.55 and reasoning:
        return _compare(v)
    if r < 0.75:
        return _capital(v)
    return _greeting(v)


def short_json_task(v: Values) -> Task:
    """A plain question answered as a one-key JSON object ({"answer": "Athens"}): what a
    `json_schema` response format with a single string field gets, closed right after it."""
    r = v.rng
    base = plain_task(v, reasoning=False)
    key = r.choice(["answer", "answer", "result", "reply", "text"])
    if base.answer.startswith(("Hello", "Hi")):
        value = base.answer.split("!")[0] + "!"
    elif base.answer.startswith("The capital"):
        value = base.answer.split(" is ")[-1].rstrip(".")
    elif base.answer.startswith("I am"):
        value = "I am a demo model."
    else:  # "3 + 4 = 7."
        value = base.answer.split(" = ")[-1].rstrip(".")
    user = base.user + r.choice(["", "", " Answer in JSON.", " Reply as JSON.",
                                 f" Give JSON with the key {key}."])
    answer = {key: value}
    schema = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
    return Task("json", user, [*base.steps[:-1], f"I will answer in JSON: {value}."],
                base.short, answer=json.dumps(answer), schema=schema, expected=answer)


def copy_task(v: Values) -> Task:
    """Repeat what the user wrote, as text or as a JSON list: short chats that are all copying,
    which is what makes a small model learn to copy early in training."""
    r = v.rng
    items = [r.choice([v.word, v.city, v.full_name, v.email, v.path, v.ticker, v.clock,
                       lambda: str(v.amount())])() for _ in range(r.randint(1, 5))]
    if r.random() < 0.5:
        text = " ".join(items)
        user = r.choice(["Repeat after me: {}", "Say exactly this: {}", "Echo: {}",
                         "Copy this text: {}"]).format(text)
        return Task("plain", user, ["The user wants the text repeated.", f"It is: {text}"],
                    "The user wants the text repeated.", answer=text)
    user = r.choice(["Put these in a JSON list: {}", "As a JSON array: {}",
                     "Make a JSON list of {}"]).format(", ".join(items))
    return Task("plain", user, ["The user wants a JSON list.", f"The items are "
                                f"{', '.join(items)}."], "The user wants a JSON list.",
                answer=json.dumps(items))
