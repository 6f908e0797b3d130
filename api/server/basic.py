"""The small routes: /health, /v1/models, /metrics, /tokenize, /detokenize."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from thinkgate.api.errors import APIError
from thinkgate.api.prompt_tokens import encode_bounded
from thinkgate.api.protocol import DetokenizeRequest, TokenizeRequest
from thinkgate.api.server.helpers import parse_body
from thinkgate.api.server.openai_chat import render_for_tokenize
from thinkgate.api.server.state import ServerState


def add_basic_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health")
    async def health() -> Response:
        """200 while the engine's step loop runs; 503 once it has died."""
        if state.cluster is not None:
            status_code, body = await state.cluster.health()
            return JSONResponse(body, status_code=status_code)
        running = getattr(state.engine, "is_running", True)
        return Response(status_code=200 if running else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {"id": name, "object": "model", "created": state.created, "owned_by": "thinkgate",
             "root": name, "parent": None, "max_model_len": state.max_model_len}
            for name in state.config.served_model_names
        ]
        return {"object": "list", "data": data}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        state.check_model(model_id)
        return {"id": model_id, "object": "model", "created": state.created,
                "owned_by": "thinkgate", "root": model_id, "parent": None,
                "max_model_len": state.max_model_len}

    @app.get("/metrics")
    async def metrics() -> Response:
        if state.cluster is not None:
            return Response(await state.cluster.metrics(),
                            media_type="text/plain; version=0.0.4")
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        req: TokenizeRequest = await parse_body(request, TokenizeRequest)
        state.check_model(req.model)
        if req.messages is not None:
            ids = render_for_tokenize(state, req)
        else:
            ids = encode_bounded(
                lambda t: state.tokenizer.encode(t, add_special_tokens=req.add_special_tokens),
                req.prompt, state.max_model_len, "prompt")
        out: dict[str, Any] = {"count": len(ids), "max_model_len": state.max_model_len,
                               "tokens": list(ids)}
        if req.return_token_strs:
            out["token_strs"] = state.tokenizer.convert_ids_to_tokens(list(ids))
        return out

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        req: DetokenizeRequest = await parse_body(request, DetokenizeRequest)
        state.check_model(req.model)
        vocab = len(state.tokenizer)
        bad = [t for t in req.tokens if not 0 <= t < vocab]
        if bad:
            raise APIError(f"token ids {bad[:5]} are outside the vocabulary (size {vocab})",
                           param="tokens")
        return {"prompt": state.tokenizer.decode(req.tokens)}
