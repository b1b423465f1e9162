"""What a llama-server router says of its models: ``GET /models`` read into frozen
:class:`RouterModel` values (tools/server/server-models.cpp, get_router_models).

Each entry has an ``id``, a ``status`` object with ``value`` (``unloaded``, ``loading``,
``loaded``, ``sleeping``, ``downloading``), ``args`` (the model server's argv), and
``failed``/``exit_code`` once a server ended with an error, plus ``aliases`` and ``source``
(``preset``, ``models_dir``, ``cache``). Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesHeaderParser
from typing import Any

# states in which the model's server runs and holds its memory
RESIDENT_STATES = frozenset({"loading", "loaded", "sleeping"})
MAX_MODELS = 4096


@dataclass(frozen=True, slots=True)
class RouterModel:
    name: str
    state: str
    failed: bool = False
    exit_code: int | None = None
    args: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    source: str | None = None

    @property
    def resident(self) -> bool:
        return self.state in RESIDENT_STATES


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(x) for x in value if isinstance(x, str | int | float))


def parse_router_models(data: Any) -> tuple[RouterModel, ...]:
    """``GET /models``'s body; ValueError (one line) when it is not a router's list."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError("not a router's model list (no data array)")
    items = data["data"]
    if len(items) > MAX_MODELS:
        raise ValueError(f"over {MAX_MODELS} models listed")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        status = item.get("status")
        if not isinstance(status, dict):
            status = {}
        value = status.get("value")
        code = status.get("exit_code")
        out.append(
            RouterModel(
                name=item["id"],
                state=value if isinstance(value, str) else "unknown",
                failed=status.get("failed") is True,
                exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                args=_strings(status.get("args")),
                aliases=_strings(item.get("aliases")),
                source=item.get("source") if isinstance(item.get("source"), str) else None,
            )
        )
    return tuple(out)


def request_fields(content_type: str, body: bytes) -> Any:
    """What a router reads a POST's ``model`` from: its JSON body, or a multipart form's
    text fields (server-http.cpp turns those into the JSON body, a name given twice into a
    list: an audio transcription names its model so). ValueError: neither."""
    head = Message()
    head["Content-Type"] = content_type
    if head.get_content_type() != "multipart/form-data":
        return json.loads(body)
    boundary = head.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise ValueError("a multipart form without its boundary")
    fields: dict[str, Any] = {}
    for part in body.split(b"--" + boundary.encode())[1:]:
        if part.startswith(b"--"):  # the closing delimiter
            break
        raw, blank, content = part.lstrip(b"\r\n").partition(b"\r\n\r\n")
        if not blank:
            raise ValueError("a multipart form part without its headers")
        headers = BytesHeaderParser().parsebytes(raw + b"\r\n\r\n")
        name = headers.get_param("name", header="content-disposition")
        if not isinstance(name, str) or headers.get_filename() is not None:
            continue  # a file
        value = content.removesuffix(b"\r\n").decode("utf-8", "replace")
        if name in fields:
            had = fields[name]
            fields[name] = [*(had if isinstance(had, list) else [had]), value]
        else:
            fields[name] = value
    return fields
