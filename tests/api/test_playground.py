"""The playground page and the token trace over HTTP, on one real `thinkgate serve` (demo model).

The browser test drives the page in headless Chromium (Selenium); without a browser it is
skipped with a message saying so (`make test` installs Debian's chromium + chromium-driver
with apt-get where they are missing). THINKGATE_SCREENSHOT=docs/playground.png refreshes the
README's screenshot.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

QUESTION = "What's the weather in Paris?"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


def _chat(http: httpx.Client, **body: Any) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
            "max_tokens": 80, **body}
    return http.post("/v1/chat/completions", json=body)


def _tools(http: httpx.Client) -> list[dict[str, Any]]:
    return http.get("/playground/defaults.json").json()["tools"]


# ---- the page's files ------------------------------------------------------------------------

def test_page_and_assets_come_from_the_server_alone(http: httpx.Client) -> None:
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    refs = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "/playground/playground.js" in refs and "/playground/playground.css" in refs
    for ref in refs:
        assert not re.match(r"^[a-z]+://|^//", ref), ref  # works offline: nothing external
        if ref.startswith("/"):
            assert http.get(ref).status_code == 200, ref
    script = http.get("/playground/playground.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert not re.search(r"https?://", script.text)
    missing = http.get("/playground/nothing.js")
    assert missing.status_code == 404 and "nothing.js" in missing.json()["error"]["message"]


def test_preloaded_tools_are_ones_the_server_accepts(http: httpx.Client) -> None:
    defaults = http.get("/playground/defaults.json").json()
    names = [t["function"]["name"] for t in defaults["tools"]]
    assert "get_weather" in names
    resp = _chat(http, tools=defaults["tools"], tool_choice="required")
    assert resp.status_code == 200, resp.text
    calls = resp.json()["choices"][0]["message"]["tool_calls"]
    assert calls and calls[0]["function"]["name"] in names
    schema_reply = _chat(http, max_tokens=60, chat_template_kwargs={"enable_thinking": False},
                         response_format={"type": "json_schema", "json_schema": {
                             "name": "r", "schema": defaults["json_schema"]}})
    assert schema_reply.status_code == 200, schema_reply.text


# ---- the trace over HTTP ---------------------------------------------------------------------

def test_streamed_trace_matches_the_full_answer_and_the_usage(client: Any, http: httpx.Client
                                                              ) -> None:
    tools = _tools(http)
    extra = {"thinkgate": {"trace": True}}
    stream = client.chat.completions.create(
        model="thinkgate-demo", messages=[{"role": "user", "content": QUESTION}], tools=tools,
        tool_choice="required", temperature=0, max_tokens=80, stream=True,
        stream_options={"include_usage": True}, extra_body=extra)
    streamed: list[dict[str, Any]] = []
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            streamed += (choice.model_extra.get("thinkgate") or {}).get("trace", [])
    assert usage is not None and len(streamed) == usage.completion_tokens
    full = _chat(http, tools=tools, tool_choice="required", thinkgate={"trace": True}).json()
    assert full["choices"][0]["thinkgate"]["trace"] == streamed  # one code path, same tokens
    switch = [i for i, t in enumerate(streamed) if t["ended_thinking"]]
    assert len(switch) == 1 and streamed[switch[0]]["text"] == "</think>"
    assert all(t["thinking"] for t in streamed[: switch[0] + 1])
    masked = [t for t in streamed if t["masked"]]
    assert masked and all(not t["thinking"] and t["num_allowed"] >= 1 for t in masked)
    name = full["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
    assert name in "".join(t["text"] for t in streamed)


def test_no_trace_unless_asked(http: httpx.Client) -> None:
    for body in ({}, {"thinkgate": {"trace": False}}, {"thinkgate": {}}):
        choice = _chat(http, max_tokens=8, **body).json()["choices"][0]
        assert "thinkgate" not in choice
    with http.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 8,
            "stream": True}) as resp:
        assert '"thinkgate":' not in "".join(resp.iter_text())


@pytest.mark.parametrize("ext", [{"trace": "maybe"}, {"tracing": True}, "trace"])
def test_a_bad_extension_is_a_400_naming_it(http: httpx.Client, ext: Any) -> None:
    resp = _chat(http, max_tokens=4, thinkgate=ext)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert "thinkgate" in f"{error['param']} {error['message']}"


# ---- the page in a browser -------------------------------------------------------------------

def _first(paths: tuple[str, ...], name: str) -> str | None:
    found = [p for p in paths if Path(p).exists()]
    return found[0] if found else shutil.which(name)


@pytest.fixture(scope="module")
def browser() -> Any:
    binary, driver = _first(CHROMIUM, "chromium"), _first(CHROMEDRIVER, "chromedriver")
    if binary is None or driver is None:
        pytest.skip("no Chromium + chromedriver here (Debian: apt-get install chromium "
                    "chromium-driver; `make test` does it where apt-get can): browser test skipped")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,860"):
        options.add_argument(arg)
    drv = webdriver.Chrome(service=Service(driver), options=options)
    yield drv
    drv.quit()


def _ask(drv: Any, question: str) -> Any:
    """Type `question`, send it, and wait until the reply's stats line (the stream ended)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    drv.find_element(By.ID, "clear").click()
    drv.find_element(By.ID, "prompt").send_keys(question)
    drv.find_element(By.ID, "send").click()
    WebDriverWait(drv, 90).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".turn.assistant .stats, .turn .error"))
    return drv.find_element(By.CSS_SELECTOR, ".turn.assistant")


def test_playground_in_a_browser(browser: Any, server: Any, tmp_path: Path) -> None:
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(server.base + "/")
    WebDriverWait(browser, 30).until(
        lambda d: "get_weather" in d.find_element(By.ID, "tools").get_attribute("value")
        and d.find_element(By.ID, "model").get_attribute("value") == "thinkgate-demo")

    reply = _ask(browser, QUESTION)
    assert not reply.find_elements(By.CSS_SELECTOR, ".error")
    assert "weather" in reply.find_element(By.CSS_SELECTOR, ".reasoning-text").text
    call = reply.find_element(By.CSS_SELECTOR, ".tool-call")
    tool_names = [t["function"]["name"] for t in json.loads(
        browser.find_element(By.ID, "tools").get_attribute("value"))]
    assert call.find_element(By.CSS_SELECTOR, ".tool-name").text in tool_names
    args = call.find_element(By.CSS_SELECTOR, ".tool-args").text
    assert isinstance(json.loads(args), dict) and "\n" in args  # pretty-printed JSON
    assert "Paris" in args  # the demo model copies the asked-for city (the README's screenshot)
    stats = reply.find_element(By.CSS_SELECTOR, ".stats").text
    assert "finish: tool_calls" in stats and "completion tokens" in stats and "TTFT" in stats
    assert not reply.find_elements(By.CSS_SELECTOR, ".trace")

    browser.find_element(By.ID, "trace").click()
    Select(browser.find_element(By.ID, "tool-choice")).select_by_value("required")
    Select(browser.find_element(By.ID, "reasoning-effort")).select_by_value("high")
    reply = _ask(browser, QUESTION)
    assert not reply.find_elements(By.CSS_SELECTOR, ".error")  # reasoning_effort accepted
    tokens = reply.find_elements(By.CSS_SELECTOR, ".trace .tok")
    completion = int(re.search(r"\+ (\d+) completion", reply.text).group(1))
    assert len(tokens) == completion
    assert reply.find_elements(By.CSS_SELECTOR, ".trace .tok.thinking")
    assert reply.find_elements(By.CSS_SELECTOR, ".trace .tok.masked")
    switch = reply.find_elements(By.CSS_SELECTOR, ".trace .tok.ended")
    assert len(switch) == 1 and switch[0].text == "</think>"

    browser.execute_script("document.getElementById('controls').scrollTop = 0")
    shot = Path(os.environ.get("THINKGATE_SCREENSHOT") or tmp_path / "playground.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 0
