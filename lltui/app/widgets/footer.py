"""The footer, without the leak of Textual's own in 8.x.

Textual's Footer recomposes whenever the screen's bindings change (every view switch) and
binds each new key to its ``compact`` reactive. Watchers of removed keys are dropped only
when that reactive changes, which it never does here, so each recompose kept its ~16 keys
alive: about 330 KiB per switch to a view and back. This footer drops them after each
recompose. The minimal case, for Textual's tracker: an App with three shown bindings and a
Footer; call ``footer.bindings_changed(app.screen)`` a hundred times; the number of
``FooterKey`` objects alive (``gc.get_objects()``) grows by the bindings shown each time.
"""

from __future__ import annotations

from textual.widgets import Footer

# where Textual's reactive module keeps an object's watchers (reactive._watch)
_WATCHERS_ATTRIBUTE = "__watchers"


class LltuiFooter(Footer):
    async def recompose(self) -> None:
        await super().recompose()
        self.drop_detached_watchers()

    def drop_detached_watchers(self) -> int:
        """Forget watchers registered by widgets no longer in the DOM; how many went."""
        watchers = getattr(self, _WATCHERS_ATTRIBUTE, None)
        if not isinstance(watchers, dict):
            return 0
        dropped = 0
        for entries in watchers.values():
            kept = [(node, callback) for node, callback in entries if node.is_attached]
            dropped += len(entries) - len(kept)
            entries[:] = kept
        return dropped
