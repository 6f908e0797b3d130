"""Online batches (/v1/batches): validate the input file, run its lines in the background through
the server's own app behind online traffic, journal each result, write the output/error files.

Status: validating → in_progress → finalizing → completed; validating → failed (a bad input
file: OpenAI's rule is that one bad line fails the whole batch, each listed in `errors` with its
line number); cancelling → cancelled (the finished lines still make the output). A line's
request goes through the app in-process, so its result body is what HTTP answers, errors
included: a 2xx lands in the output file, anything else in the error file. 429 and 503 answers
(server full, engine down) are not results: the line waits and runs again.

Everything lives in a `BatchStore`; at start-up every unfinished batch resumes from its journal,
so a restarted server neither loses nor repeats a finished line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from thinkgate.api.batch.gate import OnlineGate
from thinkgate.api.batch.lines import app_client, post_line, read_input
from thinkgate.api.batch.store import BatchStore, Journal, default_batch_dir, new_id
from thinkgate.api.errors import APIError

logger = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per batch line otherwise

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")
_RETRY_STATUS = (429, 503)
_RETRY_S = 0.5
_SAVE_EVERY_S = 1.0  # request_counts on disk may lag; a resumed batch recounts its journal


def new_batch(input_file_id: str, endpoint: str, completion_window: str,
              metadata: dict[str, str] | None) -> dict[str, Any]:
    now = int(time.time())
    return {
        "id": new_id("batch_"), "object": "batch", "endpoint": endpoint, "model": None,
        "errors": None, "input_file_id": input_file_id, "completion_window": completion_window,
        "status": "validating", "output_file_id": None, "error_file_id": None,
        "created_at": now, "in_progress_at": None, "expires_at": now + 24 * 3600,
        "finalizing_at": None, "completed_at": None, "failed_at": None, "expired_at": None,
        "cancelling_at": None, "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": metadata,
    }


def is_success(result: dict[str, Any]) -> bool:
    response = result.get("response")
    return result.get("error") is None and response is not None \
        and 200 <= response["status_code"] < 300


class OnlineBatches:
    """The store, the gate and one background task per unfinished batch."""

    def __init__(self, app: Any, state: Any) -> None:
        self.app = app
        self.state = state
        config = state.config
        self.store = BatchStore(config.batch_dir or default_batch_dir())
        stats = getattr(state.engine, "stats", None)
        self.gate = OnlineGate(config.max_batch_in_flight, lambda: state.online_in_flight,
                               lambda: int(stats().get("num_waiting", 0)) if stats else 0,
                               getattr(state, "max_num_seqs", None))
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._cancel: dict[str, asyncio.Event] = {}
        self._last_save: dict[str, float] = {}
        self._busy_reason: str | None = None

    # life cycle

    async def start(self) -> None:
        """Resume every unfinished batch (when the folder exists; else it opens on first use)."""
        if self.store.root.exists():
            self._open()
        if not self.store.is_open:
            return
        for batch in self.store.list_batches():
            if batch["status"] in UNFINISHED:
                logger.info("resuming batch %s (%s)", batch["id"], batch["status"])
                self._launch(batch["id"])

    async def stop(self) -> None:
        """Stop the background tasks; unfinished batches stay unfinished on disk."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.store.close()

    def _open(self) -> None:
        if self.store.is_open:
            return
        try:
            self.store.open()
        except BlockingIOError:
            self._busy_reason = (f"the batch folder {self.store.root} is in use by another "
                                 "thinkgate process; start this server with its own --batch-dir")
            logger.warning("online batches are off: %s", self._busy_reason)

    def ready_store(self) -> BatchStore:
        """The open store, or 503 naming the folder another process holds."""
        self._open()
        if not self.store.is_open:
            raise APIError(f"Files and batches are unavailable: {self._busy_reason}.",
                           status_code=503, type="server_error", code="batch_dir_in_use")
        return self.store

    # requests from the routes

    def create(self, input_file_id: str, endpoint: str, completion_window: str,
               metadata: dict[str, str] | None) -> dict[str, Any]:
        store = self.ready_store()
        file = store.get_file(input_file_id)
        if file["purpose"] != "batch":
            raise APIError(f"File {input_file_id!r} has purpose {file['purpose']!r}; a batch "
                           "needs a file uploaded with purpose 'batch'.", param="input_file_id")
        batch = new_batch(input_file_id, endpoint, completion_window, metadata)
        store.save_batch(batch)
        self._launch(batch["id"])
        return batch

    def cancel(self, batch_id: str) -> dict[str, Any]:
        store = self.ready_store()
        batch = store.get_batch(batch_id)
        if batch["status"] not in ("validating", "in_progress"):
            raise APIError(f"Batch {batch_id!r} is {batch['status']} and cannot be cancelled.",
                           param="batch_id")
        self._set_status(batch, "cancelling")
        self._cancel.setdefault(batch_id, asyncio.Event()).set()
        if batch_id not in self.tasks:
            self._launch(batch_id)
        return batch

    def users_of(self, file_id: str) -> list[str]:
        """Unfinished batches reading `file_id`."""
        return [b["id"] for b in self.store.batches.values()
                if b["input_file_id"] == file_id and b["status"] in UNFINISHED]

    # the background work of one batch

    def _launch(self, batch_id: str) -> None:
        self._cancel.setdefault(batch_id, asyncio.Event())
        task = asyncio.get_running_loop().create_task(self._drive(batch_id))
        self.tasks[batch_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(batch_id, None))

    async def _drive(self, batch_id: str) -> None:
        batch = self.store.get_batch(batch_id)
        try:
            if batch["status"] == "cancelling":
                await self._finish(batch, "cancelled")
                return
            requests = await self._validated(batch)
            if requests is None:
                return
            if batch["status"] == "in_progress":
                await self._run(batch, requests)
            await self._finish(batch,
                               "cancelled" if batch["status"] == "cancelling" else "completed")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not take the server down: fail the batch
            logger.exception("batch %s failed", batch_id)
            batch["errors"] = {"object": "list", "data": [
                {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}",
                 "param": None, "line": None}]}
            self._set_status(batch, "failed")

    async def _validated(self, batch: dict[str, Any]) -> list[tuple[int, dict]] | None:
        """The input's requests; a bad input fails the batch (None)."""
        path = self.store.file_path(batch["input_file_id"])
        requests, errors = await asyncio.to_thread(read_input, path, batch["endpoint"])
        if errors:
            batch["errors"] = {"object": "list", "data": errors}
            self._set_status(batch, "failed")
            return None
        if batch["status"] == "validating":
            batch["request_counts"]["total"] = len(requests)
            batch["model"] = next((d["body"].get("model") for _, d in requests
                                   if isinstance(d["body"].get("model"), str)), None)
            self._set_status(batch, "in_progress")
        return requests

    async def _run(self, batch: dict[str, Any], requests: list[tuple[int, dict]]) -> None:
        journal = self.store.journal(batch["id"])
        self._count(batch, journal.rows.values())
        cancel = self._cancel[batch["id"]]
        running: set[asyncio.Task[None]] = set()
        headers = {"Authorization": f"Bearer {self.state.config.api_key}"} \
            if self.state.config.api_key else None
        try:
            async with app_client(self.app, headers) as client:
                for line_no, data in requests:
                    if line_no in journal.rows:
                        continue
                    if not await self._acquire_unless(cancel):
                        break
                    task = asyncio.create_task(self._line(client, batch, journal, line_no, data))
                    task.add_done_callback(running.discard)
                    running.add(task)
                if running:
                    await _first_of(asyncio.gather(*running), cancel.wait())
        finally:
            for task in running:
                task.cancel()  # cancelled, or the server stops: these lines run again later
            await asyncio.gather(*running, return_exceptions=True)
            journal.close()

    async def _acquire_unless(self, cancel: asyncio.Event) -> bool:
        """Take a gate slot (True), or give up when the batch is cancelled (False)."""
        acquire = asyncio.ensure_future(self.gate.acquire())
        await _first_of(acquire, cancel.wait())
        if acquire.done() and not acquire.cancelled():
            if not cancel.is_set():
                return True
            self.gate.release()
        return False

    async def _line(self, client: Any, batch: dict[str, Any], journal: Journal, line_no: int,
                    data: dict[str, Any]) -> None:
        """Run one line until it has a result (429/503 wait and retry), then journal it."""
        self.state.mark_batch_work()  # this task's own context: its generation is batch work
        row_id = f"batch_req_{batch['id'].removeprefix('batch_')}_{line_no}"
        try:
            while True:
                try:
                    result = await post_line(client, row_id, data)
                except Exception as exc:  # e.g. a body that is not JSON: the line's error
                    logger.warning("batch %s line %d: %r", batch["id"], line_no, exc)
                    result = {"id": row_id, "custom_id": data["custom_id"], "response": None,
                              "error": {"code": "internal_error",
                                        "message": f"{type(exc).__name__}: {exc}"}}
                response = result["response"]
                if response is None or response["status_code"] not in _RETRY_STATUS:
                    break
                await asyncio.sleep(_RETRY_S)
        finally:
            self.gate.release()
        journal.append(line_no, result)
        batch["request_counts"]["completed" if is_success(result) else "failed"] += 1
        now = time.monotonic()
        if now - self._last_save.get(batch["id"], 0.0) >= _SAVE_EVERY_S:
            self._last_save[batch["id"]] = now
            self.store.save_batch(batch)

    # bookkeeping

    def _count(self, batch: dict[str, Any], results: Any) -> None:
        results = list(results)
        ok = sum(map(is_success, results))
        batch["request_counts"].update(completed=ok, failed=len(results) - ok)

    def _set_status(self, batch: dict[str, Any], status: str) -> None:
        batch["status"] = status
        batch[f"{status}_at"] = int(time.time())
        self.store.save_batch(batch)

    async def _finish(self, batch: dict[str, Any], status: str) -> None:
        """Write the output and error files from the journal, then the final status."""
        if status == "completed" and batch["status"] != "finalizing":
            self._set_status(batch, "finalizing")
        rows, file_ids = await asyncio.to_thread(self._write_results, batch["id"])
        self._count(batch, rows)
        batch.update(file_ids)
        self._set_status(batch, status)
        self.store.drop_journal(batch["id"])
        self._cancel.pop(batch["id"], None)


    def _write_results(self, batch_id: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """(the journal's results in input order, the output/error file ids written)."""
        journal = self.store.journal(batch_id)
        journal.close()
        rows = [journal.rows[n] for n in sorted(journal.rows)]
        stem = batch_id.removeprefix("batch_")
        file_ids = {}
        for key, kind, chosen in (("output_file_id", "output", [r for r in rows if is_success(r)]),
                                  ("error_file_id", "error",
                                   [r for r in rows if not is_success(r)])):
            if chosen:
                text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in chosen)
                file = self.store.add_file(text.encode("utf-8"), f"{batch_id}_{kind}.jsonl",
                                           "batch_output", file_id=f"file-{stem}{kind[0]}")
                file_ids[key] = file["id"]
        return rows, file_ids


async def _first_of(*aws: Any) -> None:
    """Wait until one of `aws` is done; cancel the others."""
    futures = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in futures:
            if not f.done():
                f.cancel()
