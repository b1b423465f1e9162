"""A llama-server router over HTTP: its models (``GET /models``), loading and unloading one
(``POST /models/load``, ``POST /models/unload``), each as bounded as the poller's requests
(:mod:`lltui.sources.llama.http`). A router's answers that are not what it sends are a
:class:`RouterHttpError` with one line; nothing here raises for what the server does."""

from __future__ import annotations

import json

import httpx

from lltui.core.llama.router_api import RouterModel, parse_router_models
from lltui.core.text import error_text
from lltui.sources.llama.http import LlamaServerClient

ACTION_MAX_BYTES = 64 * 1024


class RouterHttpError(Exception):
    """A router request that did not go through: ``str()`` is one line."""


class RouterClient(LlamaServerClient):
    """The router's own endpoints, beside the poller's (/health)."""

    def models(self) -> tuple[RouterModel, ...]:
        result, body = self._get("/models")
        if body is None or not result.ok:
            raise RouterHttpError(f"/models: {result.message or result.status}")
        data, why = body.json()
        if why is not None:
            raise RouterHttpError(f"/models: {why}")
        try:
            return parse_router_models(data)
        except ValueError as exc:
            raise RouterHttpError(f"/models: {exc}") from None

    def load(self, name: str) -> None:
        self._post("/models/load", {"model": name})

    def unload(self, name: str) -> None:
        self._post("/models/unload", {"model": name})

    def _post(self, path: str, body: dict[str, str]) -> None:
        started = self._clock()
        try:
            with self._client.stream(
                "POST",
                path,
                headers={**self._headers(), "Content-Type": "application/json"},
                content=json.dumps(body).encode(),
            ) as resp:
                content, broken = self._read_bounded(resp, ACTION_MAX_BYTES, started)
                code = resp.status_code
        except httpx.ConnectError:
            raise RouterHttpError(f"{path}: the router is not reachable") from None
        except httpx.TimeoutException:
            raise RouterHttpError(f"{path}: the router did not answer in time") from None
        except httpx.HTTPError as exc:
            raise RouterHttpError(f"{path}: {error_text(exc)}") from None
        if broken is not None:
            raise RouterHttpError(f"{path}: {broken}")
        if code == 200:
            return
        raise RouterHttpError(f"{path}: {_error_text(content) or f'HTTP {code}'}")


def _error_text(content: bytes) -> str | None:
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        text = content.decode("utf-8", errors="replace").strip()
        return text[:200] or None
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return str(err["message"])[:200]
    return None
