"""The playground page at `/`: static HTML, CSS and JS from api/static/, nothing from elsewhere.

    GET /                           the page (chat over /v1/chat/completions, token trace strip)
    GET /playground/{file}          its scripts (reply.js: one reply's rendering; playground.js:
                                    controls, request, SSE) and style sheet
    GET /playground/defaults.json   what the page preloads: the demo model's example tools and
                                    a JSON schema to start the response_format editor from

These routes hold no model data and need no API key (the page asks for the key and sends it
with its API calls).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response
from thinkgate.api.errors import APIError

router = APIRouter()

_ASSETS = {"playground.js": "text/javascript", "reply.js": "text/javascript",
           "playground.css": "text/css"}
OPEN_PATHS = ("/", "/playground/defaults.json", *(f"/playground/{name}" for name in _ASSETS))

EXAMPLE_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature_c": {"type": "number"},
                   "sunny": {"type": "boolean"}},
    "required": ["city", "temperature_c", "sunny"],
}


@cache
def _asset(name: str) -> bytes:
    return resources.files("thinkgate.api").joinpath("static", name).read_bytes()


@router.get("/", include_in_schema=False)
async def page() -> HTMLResponse:
    return HTMLResponse(_asset("index.html"))


@router.get("/playground/defaults.json", include_in_schema=False)
async def defaults() -> dict[str, Any]:
    from thinkgate.engine.demo.data import TOOLS

    return {"tools": list(TOOLS.values()), "json_schema": EXAMPLE_SCHEMA}


@router.get("/playground/{name}", include_in_schema=False)
async def asset(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise APIError(f"no playground file {name!r}; there are {sorted(_ASSETS)}",
                       status_code=404, type="not_found_error")
    return Response(_asset(name), media_type=media_type)
