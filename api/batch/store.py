"""Online batches' state on local disk: uploaded files, batch objects and each batch's journal.

Layout under the batch folder (`--batch-dir`):

    files/<id>.json        the file object (OpenAI's fields)
    files/<id>.data        its bytes
    batches/<id>.json      the batch object, rewritten on every status change
    batches/<id>.journal   one JSON line per finished input line, appended as each lands

Objects and data are written to a temporary name, fsynced and renamed over the old version, so a
killed server leaves the old or the new one, never half of one. The journal is append-only and
flushed per line; a cut-off last line (the process died mid-write) is dropped when it is opened,
and that input line runs again. One process owns a folder at a time (an flock on `.lock`).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from thinkgate.api.errors import APIError

_CHUNK = 1 << 20


def default_batch_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "thinkgate" / "batches"


def new_id(prefix: str) -> str:
    """A unique id that sorts by creation time (nanosecond clock, then random bits)."""
    return f"{prefix}{time.time_ns():016x}{secrets.token_hex(4)}"


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def not_found(kind: str, object_id: str, param: str) -> APIError:
    return APIError(f"No such {kind} object: {object_id!r}", status_code=404, param=param)


def page(items: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """OpenAI's cursor page over `items` (already in the listing order)."""
    start = 0
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise APIError(f"`after` names no object in this list: {after!r}", param="after")
        start = ids.index(after) + 1
    data = items[start:start + limit]
    return {"object": "list", "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": start + limit < len(items)}


class Journal:
    """The finished lines of one batch: `{"line": n, "result": {...}}` per line, append-only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[int, dict[str, Any]] = {}
        if path.exists():
            self._load()
        self._file = open(path, "a", encoding="utf-8")

    def _load(self) -> None:
        text = self.path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):  # the last append was cut off: that line reruns
            text = text[: text.rfind("\n") + 1]
            with open(self.path, "r+", encoding="utf-8") as f:
                f.truncate(len(text.encode("utf-8")))
        for line in text.splitlines():
            row = json.loads(line)
            self.rows.setdefault(int(row["line"]), row["result"])

    def append(self, line_no: int, result: dict[str, Any]) -> None:
        if line_no in self.rows:
            return
        self.rows[line_no] = result
        self._file.write(json.dumps({"line": line_no, "result": result},
                                    ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            os.fsync(self._file.fileno())
            self._file.close()


class BatchStore:
    """Files and batches in one folder; every object is also kept in memory for listing."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self._lock_fd: int | None = None

    @property
    def is_open(self) -> bool:
        return self._lock_fd is not None

    def open(self) -> None:
        """Take the folder (or raise `BlockingIOError` if another process holds it) and load it."""
        (self.root / "files").mkdir(parents=True, exist_ok=True)
        (self.root / "batches").mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise
        self._lock_fd = fd
        self.files = self._load_objects(self.root / "files")
        self.batches = self._load_objects(self.root / "batches")
        for data in (self.root / "files").glob("*.data"):
            if data.stem not in self.files:  # deleted, or its object never got written
                data.unlink()

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @staticmethod
    def _load_objects(folder: Path) -> dict[str, dict[str, Any]]:
        for tmp in folder.glob(".*.tmp"):
            tmp.unlink()
        objects = {}
        for path in sorted(folder.glob("*.json")):
            obj = json.loads(path.read_text(encoding="utf-8"))
            objects[obj["id"]] = obj
        return objects

    # files

    def add_file(self, source: BinaryIO | bytes, filename: str, purpose: str,
                 file_id: str | None = None, max_bytes: int | None = None) -> dict[str, Any]:
        """Store `source`'s bytes as a new file object (or replace `file_id`'s)."""
        file_id = file_id or new_id("file-")
        data = self.root / "files" / f"{file_id}.data"
        tmp = data.with_name(f".{data.name}.tmp")
        size = 0
        with open(tmp, "wb") as out:
            for chunk in _chunks(source):
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    out.close()
                    tmp.unlink()
                    raise APIError(f"The file is larger than {max_bytes} bytes.", param="file")
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, data)
        obj = {"id": file_id, "object": "file", "bytes": size, "created_at": int(time.time()),
               "filename": filename, "purpose": purpose, "status": "processed",
               "expires_at": None, "status_details": None}
        self.save_file(obj)
        return obj

    def save_file(self, obj: dict[str, Any]) -> None:
        path = self.root / "files" / f"{obj['id']}.json"
        write_atomic(path, json.dumps(obj).encode())
        self.files[obj["id"]] = obj

    def get_file(self, file_id: str) -> dict[str, Any]:
        if file_id not in self.files:
            raise not_found("File", file_id, "file_id")
        return self.files[file_id]

    def file_path(self, file_id: str) -> Path:
        self.get_file(file_id)
        return self.root / "files" / f"{file_id}.data"

    def delete_file(self, file_id: str) -> None:
        self.get_file(file_id)
        (self.root / "files" / f"{file_id}.json").unlink()  # the object first: then it is gone
        del self.files[file_id]
        (self.root / "files" / f"{file_id}.data").unlink(missing_ok=True)

    def list_files(self, purpose: str | None = None) -> list[dict[str, Any]]:
        """Newest first."""
        # list() copies in one C call: an upload's thread may add a file meanwhile
        files = [f for f in list(self.files.values()) if purpose is None or f["purpose"] == purpose]
        return sorted(files, key=lambda f: (f["created_at"], f["id"]), reverse=True)

    # batches

    def save_batch(self, batch: dict[str, Any]) -> None:
        write_atomic(self.root / "batches" / f"{batch['id']}.json", json.dumps(batch).encode())
        self.batches[batch["id"]] = batch

    def get_batch(self, batch_id: str) -> dict[str, Any]:
        if batch_id not in self.batches:
            raise not_found("Batch", batch_id, "batch_id")
        return self.batches[batch_id]

    def list_batches(self) -> list[dict[str, Any]]:
        """Newest first."""
        return sorted(self.batches.values(), key=lambda b: (b["created_at"], b["id"]),
                      reverse=True)

    def journal(self, batch_id: str) -> Journal:
        return Journal(self.root / "batches" / f"{batch_id}.journal")

    def drop_journal(self, batch_id: str) -> None:
        (self.root / "batches" / f"{batch_id}.journal").unlink(missing_ok=True)


def _chunks(source: BinaryIO | bytes) -> Iterable[bytes]:
    if isinstance(source, bytes):
        yield source
        return
    while chunk := source.read(_CHUNK):
        yield chunk
