"""The online batches' disk store, journal, validation and the gate that puts online requests
first (no server: these are the parts the HTTP tests cannot reach directly)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from thinkgate.api.batch.gate import OnlineGate
from thinkgate.api.batch.lines import read_input, validate
from thinkgate.api.batch.store import BatchStore, Journal, page
from thinkgate.api.errors import APIError


def test_files_survive_a_reopen_and_deletes_stay_deleted(tmp_path: Path) -> None:
    store = BatchStore(tmp_path)
    store.open()
    a = store.add_file(io.BytesIO(b"a" * 3_000_000), "a.jsonl", "batch")
    b = store.add_file(b"bb", "b.jsonl", "batch_output")
    assert (a["bytes"], b["bytes"]) == (3_000_000, 2)
    store.delete_file(b["id"])
    (tmp_path / "files" / ".half.json.tmp").write_text("{")  # a write cut off by a kill
    (tmp_path / "files" / "file-orphan.data").write_bytes(b"x")  # data whose object never came
    store.close()

    again = BatchStore(tmp_path)
    again.open()
    assert list(again.files) == [a["id"]]
    assert again.file_path(a["id"]).read_bytes() == b"a" * 3_000_000
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == \
        sorted([f"{a['id']}.json", f"{a['id']}.data"])
    with pytest.raises(APIError) as info:
        again.get_file(b["id"])
    assert info.value.status_code == 404 and b["id"] in info.value.message


def test_too_large_upload_leaves_nothing(tmp_path: Path) -> None:
    store = BatchStore(tmp_path)
    store.open()
    with pytest.raises(APIError, match="larger than 10 bytes"):
        store.add_file(io.BytesIO(b"x" * 11), "big.jsonl", "batch", max_bytes=10)
    assert store.files == {} and list((tmp_path / "files").iterdir()) == []


def test_one_process_owns_a_folder(tmp_path: Path) -> None:
    first = BatchStore(tmp_path)
    first.open()
    with pytest.raises(BlockingIOError):
        BatchStore(tmp_path).open()
    first.close()
    second = BatchStore(tmp_path)
    second.open()
    assert second.is_open


def test_journal_drops_a_cut_off_line_and_appends_after_it(tmp_path: Path) -> None:
    path = tmp_path / "b.journal"
    journal = Journal(path)
    journal.append(1, {"custom_id": "a"})
    journal.append(2, {"custom_id": "b"})
    journal.append(1, {"custom_id": "again"})  # a line is recorded once
    journal.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"line": 3, "result": {"custom_')  # the process died mid-write
    reopened = Journal(path)
    assert {n: r["custom_id"] for n, r in reopened.rows.items()} == {1: "a", 2: "b"}
    reopened.append(3, {"custom_id": "c"})
    reopened.close()
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(r["line"], r["result"]["custom_id"]) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]


def test_page_cursor() -> None:
    items = [{"id": f"x{i}"} for i in range(5)]
    first = page(items, None, 2)
    assert [i["id"] for i in first["data"]] == ["x0", "x1"] and first["has_more"]
    last = page(items, first["last_id"], 10)
    assert [i["id"] for i in last["data"]] == ["x2", "x3", "x4"] and not last["has_more"]
    assert page(items, "x4", 3)["data"] == []
    with pytest.raises(APIError, match="x9"):
        page(items, "x9", 3)


def test_validate_follows_openai_rules() -> None:
    url = "/v1/responses"
    good = json.dumps({"custom_id": "a", "method": "POST", "url": url, "body": {}})
    lines = [
        (1, good),
        (2, "[1, 2]"),
        (4, json.dumps({"custom_id": "", "url": url, "body": {}})),
        (5, json.dumps({"custom_id": "b", "url": "/v1/completions", "body": {}})),
        (6, json.dumps({"custom_id": "c", "url": url, "body": "text"})),
        (7, json.dumps({"custom_id": "d", "url": url, "body": {}, "extra": 1})),
        (9, good),
    ]
    requests, errors = validate(lines, url)
    assert [(e["line"], e["code"], e["param"]) for e in errors] == [
        (2, "invalid_json_line", None), (4, "invalid_custom_id", "custom_id"),
        (5, "invalid_url", "url"), (6, "invalid_body", "body"),
        (7, "unknown_parameter", "extra"), (9, "duplicate_custom_id", "custom_id")]
    assert [n for n, _ in requests] == [1, 9]
    assert validate([], url)[1][0]["code"] == "empty_file"


def test_read_input_numbers_lines_as_in_the_file(tmp_path: Path) -> None:
    line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions",
                       "body": {}})
    path = tmp_path / "in.jsonl"
    path.write_text("\n\n" + line + "\n   \n" + line.replace('"a"', '"b"') + "\n")
    requests, errors = read_input(path, "/v1/completions")
    assert errors == [] and [(n, d["custom_id"]) for n, d in requests] == [(3, "a"), (5, "b")]
    path.write_bytes(b"\xff\xfe not utf-8\n")
    assert [e["code"] for e in read_input(path, "/v1/completions")[1]] == ["invalid_file"]
    path.write_text("\n \n")
    assert [e["code"] for e in read_input(path, "/v1/completions")[1]] == ["empty_file"]


def test_gate_bounds_batch_lines_and_yields_to_waiting_online_requests() -> None:
    async def scenario() -> list[str]:
        load = {"online": 0, "waiting": 0}
        gate = OnlineGate(2, lambda: load["online"], lambda: load["waiting"], poll_s=0.001)
        events: list[str] = []

        async def line(name: str) -> None:
            await gate.acquire()
            events.append(name)

        await line("a")
        await line("b")
        third = asyncio.ensure_future(line("c"))
        await asyncio.sleep(0.01)
        assert events == ["a", "b"] and not third.done()  # the bound
        load.update(online=1, waiting=1)  # an online request queued in the engine
        gate.release()
        await asyncio.sleep(0.01)
        assert not third.done()  # a free slot, but the online request goes first
        load.update(online=1, waiting=0)  # it was scheduled: online running, nothing queued
        await asyncio.wait_for(third, 1.0)
        gate.release()
        load.update(online=0, waiting=3)  # only batch work queued: no reason to wait
        await asyncio.wait_for(line("d"), 1.0)
        return events

    assert asyncio.run(scenario()) == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="max_in_flight must be >= 1, got 0"):
        OnlineGate(0, lambda: 0, lambda: 0)


def test_gate_leaves_an_engine_slot_for_online_requests() -> None:
    async def scenario() -> None:
        load = {"online": 0}
        gate = OnlineGate(10, lambda: load["online"], lambda: 0, capacity=4, poll_s=0.001)
        for _ in range(3):
            await asyncio.wait_for(gate.acquire(), 1.0)
        fourth = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0.01)
        assert gate.running == 3 and not fourth.done()  # slot 4 stays free for online traffic
        load["online"] = 1  # an online request took it
        gate.release()
        await asyncio.sleep(0.01)
        assert gate.running == 2 and not fourth.done()  # 2 batch + 1 online: one left free
        load["online"] = 0
        await asyncio.wait_for(fourth, 1.0)
        assert gate.running == 3

    asyncio.run(scenario())
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        OnlineGate(1, lambda: 0, lambda: 0, capacity=0)
    assert OnlineGate(1, lambda: 0, lambda: 0, capacity=1).max_busy == 1
