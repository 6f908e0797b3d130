"""Tool-call requests (values copied from the question) and tool-result follow-ups.

The first eight tools are the demo model's example tools (`engine/demo/data.py`, preloaded by
the playground); the others add paths, names and dates. Arguments keep the schema's property
order, as the hermes grammar writes them.
"""

from __future__ import annotations

import json
import random
import re

from thinkgate.benchmarks.training.task import Task, fn, says
from thinkgate.benchmarks.training.tasks_plain import plain_task
from thinkgate.benchmarks.training.values import Values
from thinkgate.engine.demo.data import TOOLS as DEMO_TOOLS

_S = {"type": "string"}
TOOLS: dict[str, dict] = {**DEMO_TOOLS, **{t["function"]["name"]: t for t in [
    fn("read_file", "Read a text file", {"path": _S}, ["path"]),
    fn("find_contact", "Find a person in the address book", {"name": _S}, ["name"]),
    fn("create_event", "Add an event to the calendar",
       {"title": _S, "date": _S, "time": _S}, ["title", "date"]),
    fn("get_directions", "Directions between two cities",
       {"origin": _S, "destination": _S}, ["origin", "destination"]),
]}}

_LABELS = {"to": "recipient", "from_currency": "source currency", "to_currency":
           "target currency", "max_results": "number of results", "target_language": "language"}
# Free-text arguments (titles, subjects, bodies, queries, labels): where a copied value ends is
# what the model misses most, so the v3 mix draws these tools more often in training; held-out
# sets draw the twelve alike.
_TRAIN_WEIGHTS = {"send_email": 3, "create_event": 3, "search_web": 2, "set_alarm": 2,
                  "translate_text": 2, "find_contact": 2}
_CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear"]


def _request(name: str, v: Values) -> tuple[str, dict, str]:
    """(user text, arguments, what the user wants as a reasoning phrase) for one tool."""
    r = v.rng
    if name == "get_weather":
        city = v.city()
        user = r.choice(["What's the weather in {c}?", "Is it raining in {c}?",
                         "How warm is it in {c} today?", "Weather for {c} please.",
                         "What is the weather like in {c}?", "Check the weather in {c}."])
        args: dict = {"city": city}
        if r.random() < 0.3:
            args["unit"] = r.choice(["celsius", "fahrenheit"])
            user += f" Use {args['unit']}."
        return user.format(c=city), args, f"the weather in {city}"
    if name == "get_time":
        city = v.city()
        user = r.choice(["What time is it in {c}?", "Tell me the local time in {c}.",
                         "What's the time in {c} right now?"])
        return user.format(c=city), {"city": city}, f"the time in {city}"
    if name == "search_web":
        topic = v.phrase(1, 3)
        user = r.choice(["Search the web for {t}.", "Find articles about {t}.",
                         "Look up {t} online.", "Search for {t}."]).format(t=topic)
        args = {"query": topic}
        if r.random() < 0.4:
            args["max_results"] = v.integer(1, 20)
            user += f" Show {args['max_results']} results."
        return user, args, f"a web search for {topic}"
    if name == "get_stock_price":
        t = v.ticker()
        user = r.choice(["What is the stock price of {t}?", "How is {t} trading?",
                         "Get me the price of {t} stock."]).format(t=t)
        return user, {"ticker": t}, f"the stock price of {t}"
    if name == "convert_currency":
        a, b, amount = v.currency(), v.currency(), v.amount()
        while b == a:
            b = v.currency()
        user = r.choice(["Convert {n} {a} to {b}.", "How much is {n} {a} in {b}?",
                         "Change {n} {a} into {b}."]).format(n=amount, a=a, b=b)
        return user, {"amount": amount, "from_currency": a, "to_currency": b}, \
            f"to convert {amount} {a} into {b}"
    if name == "send_email":
        to, subject, body = v.email(), v.phrase(1, 3), v.phrase(2, 5)
        user = r.choice(["Email {to} about {s} and say {b}.",
                         "Send an email to {to} with the subject {s} saying {b}.",
                         "Write to {to} about {s}: {b}."]).format(to=to, s=subject, b=body)
        return user, {"to": to, "subject": subject, "body": body}, f"an email to {to}"
    if name == "set_alarm":
        t = v.clock()
        user = r.choice(["Set an alarm for {t}.", "Wake me up at {t}.",
                         "Please set an alarm at {t}."]).format(t=t)
        args = {"time": t}
        if r.random() < 0.5:
            args["label"] = v.phrase(1, 2)
            user += f" Label it {args['label']}."
        return user, args, f"an alarm at {t}"
    if name == "translate_text":
        text, lang = v.phrase(1, 4), v.language()
        user = r.choice(["Translate '{x}' into {l}.", "How do you say '{x}' in {l}?",
                         "Translate this to {l}: {x}"]).format(x=text, l=lang)
        return user, {"text": text, "target_language": lang}, f"'{text}' in {lang}"
    if name == "read_file":
        p = v.path()
        user = r.choice(["Read the file {p}.", "Open {p} and show it to me.",
                         "What is in {p}?"]).format(p=p)
        return user, {"path": p}, f"the contents of {p}"
    if name == "find_contact":
        who = v.full_name() if r.random() < 0.7 else v.first_name()
        user = r.choice(["Find {n} in my contacts.", "Look up the contact {n}.",
                         "Do I have a number for {n}?"]).format(n=who)
        return user, {"name": who}, f"the contact {who}"
    if name == "create_event":
        title, date = v.phrase(1, 3), v.date()
        user = f"Add an event called {title} on {date}"
        args = {"title": title, "date": date}
        if r.random() < 0.5:
            args["time"] = v.clock()
            user += f" at {args['time']}"
        return user + ".", args, f"an event called {title}"
    assert name == "get_directions", name
    a, b = v.city(), v.city()
    user = r.choice(["How do I get from {a} to {b}?", "Directions from {a} to {b}, please.",
                     "Route from {a} to {b}?"]).format(a=a, b=b)
    return user, {"origin": a, "destination": b}, f"directions from {a} to {b}"


def _tool_list(r: random.Random, must: list[str], long_share: float = 0.0) -> list[dict]:
    """1-3 tools with the `must` ones; (v3 / v4 mix, a `long_share` of them) a long list: the
    demo's eight in the playground's order when they hold `must`, or 4-8 tools shuffled."""
    if long_share and r.random() < long_share:
        if set(must) <= set(DEMO_TOOLS) and r.random() < 0.6:
            return list(DEMO_TOOLS.values())
        names = r.sample(sorted(TOOLS), r.randint(4, 8))
    else:
        names = r.sample(sorted(TOOLS), r.randint(1, 3))
    for m in must:
        if m not in names:
            names[r.randrange(len(names))] = m
    names = list(dict.fromkeys(names + must))  # a replaced name may have been another must
    r.shuffle(names)
    return [TOOLS[n] for n in names]


def _steps(name: str, args: dict, want: str) -> tuple[list[str], str]:
    desc = TOOLS[name]["function"]["description"]
    props = TOOLS[name]["function"]["parameters"]["properties"]
    steps = [f"The user wants {want}.", f"I have a tool for that: {name}. {desc}."]
    steps += [f"The {_LABELS.get(k, k)} is {v}." for k, v in args.items()]
    missing = [k for k in props if k not in args]
    if missing:
        steps.append(f"No {_LABELS.get(missing[0], missing[0])} was given, so I leave it out.")
    steps.append(f"I will call {name}.")
    return steps, f"Let me check: {says(args)}."


def tool_task(v: Values, name: str | None = None) -> Task:
    """One request answered by one call, or (one time in ten) two calls of the same tool."""
    r = v.rng
    if name is None and v.v3:
        name = r.choices(sorted(TOOLS), [_TRAIN_WEIGHTS.get(n, 1) for n in sorted(TOOLS)])[0]
    name = name or r.choice(sorted(TOOLS))
    user, args, want = _request(name, v)
    if name in ("get_weather", "get_time", "get_stock_price") and r.random() < (
            0.2 if v.v3 else 0.1):
        user2, args2, want2 = _request(name, v)
        key = next(iter(args))
        if r.random() < 0.5:
            user = f"{user} And {user2[0].lower()}{user2[1:]}"
        else:  # "Weather for A and B please. Use celsius.": user2's other words are not asked
            user = user.replace(str(args[key]), f"{args[key]} and {args2[key]}", 1)
            args2 = {**args, key: args2[key]}
        steps = [f"The user wants {want} and {want2}.",
                 f"That is two calls of {name}: {says(args)}, then {says(args2)}.",
                 f"I will call {name} twice."]
        return Task("tool", user, steps, f"The user wants {want} and {want2}. I will call "
                    f"{name} twice.", calls=[(name, args), (name, args2)],
                    tools=_tool_list(r, [name], v.long_share), check=f"Let me check: {says(args)}; "
                    f"{says(args2)}.")
    steps, check = _steps(name, args, want)
    return Task("tool", user, steps, f"The user wants {want}. I will call {name}.",
                calls=[(name, args)], tools=_tool_list(r, [name], v.long_share), check=check)


def _result(name: str, args: dict, v: Values) -> tuple[dict, str]:
    """(tool result, an answer that uses it)."""
    r = v.rng
    if r.random() < 0.15:  # the plain shape the README's Responses example sends
        n = v.integer(1, 99)
        return {"status": "ok", "value": n}, f"Done. {name} returned {n}."
    if name == "get_weather":
        t, c = v.integer(-20, 40), r.choice(_CONDITIONS)
        unit = "degrees" if "unit" not in args else f"degrees {args['unit']}"
        return ({"city": args["city"], "temperature": t, "conditions": c},
                f"It is {t} {unit} and {c} in {args['city']}.")
    if name == "get_time":
        t = v.clock()
        return {"city": args["city"], "time": t}, f"It is {t} in {args['city']}."
    if name == "search_web":
        hits = [v.phrase(2, 4) for _ in range(r.randint(1, 2))]
        return {"results": hits}, "I found: " + "; ".join(hits) + "."
    if name == "get_stock_price":
        p = v.amount()
        return {"ticker": args["ticker"], "price": p}, f"{args['ticker']} trades at {p}."
    if name == "convert_currency":
        out = v.amount()
        return ({"result": out, "currency": args["to_currency"]},
                f"{args['amount']} {args['from_currency']} is {out} {args['to_currency']}.")
    if name == "send_email":
        return {"status": "sent", "to": args["to"]}, f"I sent the email to {args['to']}."
    if name == "set_alarm":
        return {"status": "set", "time": args["time"]}, f"Your alarm is set for {args['time']}."
    if name == "translate_text":
        out = v.phrase(1, 4)
        return {"translation": out}, f"In {args['target_language']} that is: {out}"
    if name == "read_file":
        text = v.phrase(3, 7)
        return {"path": args["path"], "content": text}, f"The file {args['path']} says: {text}"
    if name == "find_contact":
        phone = f"{v.integer(100, 999)}-{v.integer(1000, 9999)}"
        return {"name": args["name"], "phone": phone}, f"{args['name']}: {phone}."
    if name == "create_event":
        return ({"status": "created", "id": v.integer(1, 9999)},
                f"I added {args['title']} to your calendar on {args['date']}.")
    km = v.integer(5, 3000)
    return ({"distance_km": km},
            f"It is {km} km from {args['origin']} to {args['destination']}.")


def result_task(v: Values) -> Task:
    """A request, the assistant's call, the tool's result, and an answer built from it."""
    r = v.rng
    name = r.choice(sorted(TOOLS))
    user, args, want = _request(name, v)
    result, answer = _result(name, args, v)
    history = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
        {"role": "tool", "content": json.dumps(result)},
    ]
    scalars = {k: x for k, x in result.items() if not isinstance(x, list)}
    used = [str(x) for x in scalars.values() if str(x) in answer]
    steps = [f"The tool {name} answered.", "I will tell the user."]
    if scalars:
        steps.insert(1, f"It returned {says(scalars)}.")
    return Task("result", user, steps, f"The tool {name} answered. I will tell the user.",
                answer=answer, tools=_tool_list(r, [name], v.long_share), history=history,
                expected={"used": used}, check=f"Let me check: {answer}")


def forced_task(v: Values) -> Task:
    """A request no tool fits ("Say hello.") answered by a call anyway, written as the grammar
    of `tool_choice` required or named writes it (only such a grammar leads here): the required
    arguments take a word or number of the request, and the call closes right after them."""
    r = v.rng
    base = plain_task(v, reasoning=False)
    name = r.choice(sorted(TOOLS))
    params = TOOLS[name]["function"]["parameters"]
    words = re.findall(r"[A-Za-z]+", base.user)
    numbers = re.findall(r"\d+", base.user)
    args: dict = {}
    for key in params["required"]:
        kind = params["properties"][key].get("type")
        if kind in ("number", "integer"):
            args[key] = int(numbers[0]) if numbers else 1
        else:
            args[key] = words[-1] if words else base.user
    return Task("tool", base.user, [base.steps[0], f"I will call {name}."], base.short,
                calls=[(name, args)], tools=_tool_list(r, [name], v.long_share), compact=True)
