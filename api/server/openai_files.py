"""OpenAI's Files API for batches: upload (multipart, purpose `batch`), list, retrieve, content,
delete. The files live in the online batches' store (`api/batch/store.py`, under --batch-dir)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.datastructures import UploadFile
from thinkgate.api.batch.store import page
from thinkgate.api.errors import APIError

router = APIRouter()

MAX_FILE_BYTES = 200 * 1024 * 1024  # OpenAI's limit for a batch input file
_PURPOSES = ("batch",)
_FORM_FIELDS = {"file", "purpose", "expires_after[anchor]", "expires_after[seconds]"}


def batches_of(request: Request) -> Any:
    """The app's `OnlineBatches` (api/batch/online.py)."""
    return request.app.state.batches


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise APIError(f"Invalid value for '{name}': expected an integer from {low} to {high}, "
                       f"got {raw!r}", param=name, code="invalid_value")
    return value


def _expires_at(form: Any, created_at: int) -> int | None:
    anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise APIError(f"Invalid value for 'expires_after.anchor': expected 'created_at', got "
                       f"{anchor!r}", param="expires_after.anchor")
    try:
        value = int(seconds)
    except (TypeError, ValueError):
        value = -1
    if not 3600 <= value <= 2592000:
        raise APIError("Invalid value for 'expires_after.seconds': expected an integer from 3600 "
                       f"to 2592000, got {seconds!r}", param="expires_after.seconds")
    return created_at + value


@router.post("/v1/files")
async def create_file(request: Request) -> dict[str, Any]:
    store = batches_of(request).ready_store()
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise APIError("Upload a file as multipart/form-data with the fields `file` and "
                       "`purpose`.", param="file")
    async with request.form(max_files=1) as form:
        unknown = sorted(set(form.keys()) - _FORM_FIELDS)
        if unknown:
            raise APIError(f"Unrecognized request argument supplied: {unknown[0]}",
                           param=unknown[0])
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose not in _PURPOSES:
            raise APIError(f"Invalid value for 'purpose': this server accepts {list(_PURPOSES)}, "
                           f"got {purpose!r}", param="purpose")
        if not isinstance(upload, UploadFile):
            raise APIError("Missing the file: send it in the multipart field `file`.",
                           param="file", code="missing_required_parameter")
        obj = await asyncio.to_thread(store.add_file, upload.file,
                                      upload.filename or "upload.jsonl", purpose,
                                      max_bytes=MAX_FILE_BYTES)
    expires_at = _expires_at(form, obj["created_at"])
    if expires_at is not None:
        obj["expires_at"] = expires_at
        store.save_file(obj)
    return obj


@router.get("/v1/files")
async def list_files(request: Request) -> dict[str, Any]:
    store = batches_of(request).ready_store()
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError(f"Invalid value for 'order': expected 'asc' or 'desc', got {order!r}",
                       param="order")
    files = store.list_files(request.query_params.get("purpose"))
    if order == "asc":
        files.reverse()
    limit = query_int(request, "limit", 10000, 1, 10000)
    return page(files, request.query_params.get("after"), limit)


@router.get("/v1/files/{file_id}")
async def retrieve_file(request: Request, file_id: str) -> dict[str, Any]:
    return batches_of(request).ready_store().get_file(file_id)


@router.get("/v1/files/{file_id}/content")
async def file_content(request: Request, file_id: str) -> FileResponse:
    store = batches_of(request).ready_store()
    obj = store.get_file(file_id)
    return FileResponse(store.file_path(file_id), media_type="application/octet-stream",
                        filename=obj["filename"])


@router.delete("/v1/files/{file_id}")
async def delete_file(request: Request, file_id: str) -> dict[str, Any]:
    batches = batches_of(request)
    store = batches.ready_store()
    store.get_file(file_id)
    users = batches.users_of(file_id)
    if users:  # its lines are read again when the batch resumes after a restart
        raise APIError(f"File {file_id!r} is the input of unfinished batch {users[0]!r}; cancel "
                       "the batch or let it finish first.", param="file_id")
    store.delete_file(file_id)
    return {"id": file_id, "object": "file", "deleted": True}
