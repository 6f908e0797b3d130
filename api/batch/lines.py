"""Batch lines in OpenAI's batch JSONL: offline `thinkgate run-batch` and online /v1/batches.

Each input line is `{"custom_id", "method": "POST", "url", "body"}` with url /v1/chat/completions
or /v1/completions. Every line goes through the server's own FastAPI app in-process (an ASGI
transport, no socket), so a batch result body is byte-for-byte what the HTTP server would answer,
errors included. All lines are in flight at once (bounded), so the engine batches them. Results are
appended and flushed as they finish; `--resume` skips the custom_ids already in the output.
Online batches (`online.py`) use the same parsing and posting, with `validate` checking a whole
input file first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger(__name__)

BATCH_URLS = ("/v1/chat/completions", "/v1/completions")


class BatchLineError(ValueError):
    """A line that is not a valid batch request; carries what could be read of it, and a `code`
    and `param` for the online batch's `errors` list."""

    def __init__(self, message: str, custom_id: str | None, code: str = "invalid_request",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.custom_id = custom_id
        self.code = code
        self.param = param


def result_id(line_no: int) -> str:
    """A stable id per input line, so a resumed run can recognise lines without a custom_id."""
    return f"batch_req_{line_no:08d}"


def parse_line(line_no: int, text: str, urls: tuple[str, ...] = BATCH_URLS) -> dict[str, Any]:
    """The request of one input line, or `BatchLineError` saying what is wrong with it."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BatchLineError(f"line {line_no}: not valid JSON ({exc})", None,
                             "invalid_json_line") from exc
    if not isinstance(data, dict):
        raise BatchLineError(f"line {line_no}: a batch line must be a JSON object", None,
                             "invalid_json_line")
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise BatchLineError(f"line {line_no}: `custom_id` must be a non-empty string", None,
                             "invalid_custom_id", "custom_id")
    if data.get("method", "POST") != "POST":
        raise BatchLineError(f"line {line_no}: method must be POST, got {data.get('method')!r}",
                             custom_id, "invalid_method", "method")
    if data.get("url") not in urls:
        raise BatchLineError(f"line {line_no}: url must be one of {list(urls)}, got "
                             f"{data.get('url')!r}", custom_id, "invalid_url", "url")
    if not isinstance(data.get("body"), dict):
        raise BatchLineError(f"line {line_no}: `body` must be a JSON object", custom_id,
                             "invalid_body", "body")
    extra = set(data) - {"custom_id", "method", "url", "body"}
    if extra:
        raise BatchLineError(f"line {line_no}: unknown fields {sorted(extra)}", custom_id,
                             "unknown_parameter", sorted(extra)[0])
    return data


def error_line(line_no: int, custom_id: str | None, message: str) -> dict[str, Any]:
    return {"id": result_id(line_no), "custom_id": custom_id, "response": None,
            "error": {"code": "invalid_request", "message": message}}


async def run_line(client: Any, line_no: int, text: str) -> dict[str, Any]:
    """One input line → one OpenAI batch result line (never raises for bad input)."""
    try:
        data = parse_line(line_no, text)
    except BatchLineError as exc:
        return error_line(line_no, exc.custom_id, str(exc))
    return await post_line(client, result_id(line_no), data)


async def post_line(client: Any, row_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """A parsed line's request through `client` → its result line (the HTTP answer, any status).

    A streaming request has no single body to record, so it is refused without running."""
    if data["body"].get("stream"):
        return {"id": row_id, "custom_id": data["custom_id"], "response": None,
                "error": {"code": "invalid_request",
                          "message": "`stream` is not supported in a batch request"}}
    response = await client.post(data["url"], json=data["body"])
    return {
        "id": row_id,
        "custom_id": data["custom_id"],
        "response": {"status_code": response.status_code,
                     "request_id": f"req_{uuid.uuid4().hex}", "body": response.json()},
        "error": None,
    }


def app_client(app: Any, headers: dict[str, str] | None = None) -> Any:
    """An httpx client over an ASGI app in this process (no socket, no lifespan events); the
    app's Origin and Host checks let its requests through (api/server/guard.py)."""
    import httpx
    from thinkgate.api.server.guard import in_process_app

    transport = httpx.ASGITransport(app=in_process_app(app))
    return httpx.AsyncClient(transport=transport, base_url="http://thinkgate.batch",
                             headers=headers, timeout=None)


def read_lines(path: str | Path) -> list[tuple[int, str]]:
    """(1-based line number, text) of every non-blank line."""
    with open(path, encoding="utf-8") as f:
        return [(i, line.strip()) for i, line in enumerate(f, 1) if line.strip()]


def finished_keys(output: str | Path) -> set[str]:
    """The custom_ids and result ids already written to `output` (for --resume)."""
    keys: set[str] = set()
    path = Path(output)
    if not path.exists():
        return keys
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off by an interrupted run: redo it
        if isinstance(row, dict):
            keys.update(k for k in (row.get("custom_id"), row.get("id")) if isinstance(k, str))
    return keys


def pending_lines(lines: Iterable[tuple[int, str]], done: set[str]) -> Iterator[tuple[int, str]]:
    """The lines whose custom_id (or, for unreadable lines, result id) is not in `done`."""
    for line_no, text in lines:
        try:
            custom_id = parse_line(line_no, text)["custom_id"]
        except BatchLineError as exc:
            custom_id = exc.custom_id
        if custom_id in done or (custom_id is None and result_id(line_no) in done):
            continue
        yield line_no, text


def duplicate_lines(lines: list[tuple[int, str]],
                    urls: tuple[str, ...] = BATCH_URLS) -> dict[int, str]:
    """Line numbers whose custom_id repeats an earlier line's → the error message."""
    seen: dict[str, int] = {}
    dupes = {}
    for line_no, text in lines:
        try:
            custom_id = parse_line(line_no, text, urls)["custom_id"]
        except BatchLineError:
            continue
        if custom_id in seen:
            dupes[line_no] = f"line {line_no}: duplicate custom_id {custom_id!r} (first on line " \
                             f"{seen[custom_id]})"
        else:
            seen[custom_id] = line_no
    return dupes


async def run_lines(
    client: Any,
    lines: list[tuple[int, str]],
    emit: Callable[[dict[str, Any]], None],
    max_in_flight: int,
) -> None:
    """Run every line concurrently (at most `max_in_flight`), emitting each result as it lands."""
    dupes = duplicate_lines(lines)
    gate = asyncio.Semaphore(max_in_flight)

    async def one(line_no: int, text: str) -> None:
        if line_no in dupes:
            custom_id = json.loads(text)["custom_id"]
            emit(error_line(line_no, custom_id, dupes[line_no]))
            return
        async with gate:
            emit(await run_line(client, line_no, text))

    await asyncio.gather(*(one(n, t) for n, t in lines))


def open_output(path: str | Path, resume: bool) -> TextIO:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if resume and path.exists():
        text = path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):  # drop a half-written last line
            path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")
    return open(path, "a" if resume else "w", encoding="utf-8")


def validate(lines: list[tuple[int, str]], endpoint: str) -> tuple[list[tuple[int, dict]], list]:
    """An online batch's check of its whole input against its one `endpoint`: (the parsed
    requests, OpenAI batch errors `{code, message, param, line}`); any error fails the batch."""
    if not lines:
        return [], [{"code": "empty_file", "message": "The input file has no requests.",
                     "param": None, "line": None}]
    parsed, errors = [], []
    for line_no, text in lines:
        try:
            parsed.append((line_no, parse_line(line_no, text, (endpoint,))))
        except BatchLineError as exc:
            errors.append({"code": exc.code, "message": str(exc), "param": exc.param,
                           "line": line_no})
    for line_no, message in duplicate_lines(lines, (endpoint,)).items():
        errors.append({"code": "duplicate_custom_id", "message": message, "param": "custom_id",
                       "line": line_no})
    errors.sort(key=lambda e: e["line"])
    return parsed, errors


def read_input(path: str | Path, endpoint: str) -> tuple[list[tuple[int, dict]], list]:
    """An input file's requests and OpenAI batch errors (see `validate`)."""
    try:
        lines = read_lines(path)
    except UnicodeDecodeError as exc:
        return [], [{"code": "invalid_file", "message": f"The input file is not UTF-8 text: "
                     f"{exc}", "param": None, "line": None}]
    return validate(lines, endpoint)
