"""OpenAI's Batch API: create, retrieve, list, cancel. The work runs in the background
(`api/batch/online.py`) through this same app, behind online requests; state is on disk."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator
from thinkgate.api.batch.online import ENDPOINTS, OnlineBatches
from thinkgate.api.batch.store import page
from thinkgate.api.server.helpers import parse_body
from thinkgate.api.server.openai_files import batches_of, query_int
from thinkgate.api.server.openai_files import router as files_router
from thinkgate.api.server.state import ServerState

router = APIRouter()


class OutputExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    anchor: Literal["created_at"]
    seconds: int = Field(ge=3600, le=2592000)


class BatchCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1)
    endpoint: Literal[ENDPOINTS]  # type: ignore[valid-type]
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = None
    output_expires_after: OutputExpiresAfter | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > 16:
            raise ValueError(f"metadata holds at most 16 keys, got {len(value)}")
        for key, item in value.items():
            if len(key) > 64 or len(item) > 512:
                raise ValueError(f"metadata key {key[:64]!r}: keys are at most 64 characters "
                                 "and values at most 512")
        return value


@router.post("/v1/batches")
async def create_batch(request: Request) -> dict[str, Any]:
    batches = batches_of(request)
    batches.ready_store()
    req = await parse_body(request, BatchCreateRequest)
    return batches.create(req.input_file_id, req.endpoint, req.completion_window, req.metadata)


@router.get("/v1/batches")
async def list_batches(request: Request) -> dict[str, Any]:
    store = batches_of(request).ready_store()
    limit = query_int(request, "limit", 20, 1, 100)
    return page(store.list_batches(), request.query_params.get("after"), limit)


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(request: Request, batch_id: str) -> dict[str, Any]:
    return batches_of(request).ready_store().get_batch(batch_id)


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(request: Request, batch_id: str) -> dict[str, Any]:
    return batches_of(request).cancel(batch_id)


def add_batch_routes(app: FastAPI, state: ServerState) -> OnlineBatches:
    """/v1/files and /v1/batches, and the background runner the app's lifespan starts/stops."""
    app.state.batches = OnlineBatches(app, state)
    app.include_router(files_router)
    app.include_router(router)
    return app.state.batches
