"""The KV fill of a watched server, folded from each ``/slots`` answer: the tokens each slot
holds times what a token takes on each device (the launch's prediction,
:attr:`~.compare.LaunchCheck.kv`), with a short history for how fast it fills. A server
started with ``--no-slots`` answers 501: said once, in the state's ``kv_note``."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from lltui.core.memory.kv_fill import KvHistory

if TYPE_CHECKING:
    from lltui.services.launch.state import LaunchState
    from lltui.sources.llama.http import ServerPoll as Answer

HISTORY = 64  # samples kept for the rate (a poll a second: a minute)
NO_SLOTS = "no KV fill: the server's /slots is disabled (started with --no-slots)"
NO_LAYOUT = "no KV fill: no prediction of this server's caches to size the tokens by"


class KvWatch:
    """Folds ``/slots`` answers into the state's ``kv``."""

    def __init__(self) -> None:
        self._history = KvHistory(HISTORY)

    def fold(self, st: LaunchState, poll: Answer) -> LaunchState:
        from lltui.sources.llama.http import DISABLED

        if any(e.endpoint == "/slots" and e.status == DISABLED for e in poll.endpoints):
            return replace(st, kv=None, kv_note=NO_SLOTS) if st.kv_note != NO_SLOTS else st
        if poll.slots is None:
            return st
        layout = st.check.kv if st.check is not None else None
        if layout is None:
            if st.phase not in ("ready", "following"):
                return st  # the load log's prediction may still come: nothing to say yet
            return replace(st, kv_note=NO_LAYOUT) if st.kv_note != NO_LAYOUT else st
        slots = poll.slots
        fill = self._history.fold(
            layout, [s.n_prompt_tokens for s in slots], [s.n_ctx for s in slots], poll.t
        )
        return replace(st, kv=fill, kv_note=None)
