"""The launch view's launches: at most one llama-server (or router) of the app's, or one
followed by its URL. Start, stop, restart, force, follow and a router's loads run on the
app's worker threads, one at a time (a Stop pressed while a server starts waits for it and
stops it); each applies the app's :class:`~lltui.core.cmdline.launch_spec.LaunchPolicy`
first. What the view shows is the :class:`~.watch.LaunchWatch`'s state, handed over by
``notify``; this module has no loop of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from lltui.core.cmdline.address import AddressError, check_server_url
from lltui.core.cmdline.launch_spec import ANY_LAUNCH, LaunchError, LaunchPolicy
from lltui.core.monitor.models import RigSample
from lltui.services.launch.polls import POLL_INTERVAL_S, RouterPoll, ServerPoll
from lltui.services.launch.request import LaunchRequest
from lltui.services.launch.router import RouterRefused, RouterSession
from lltui.services.launch.router_prep import RouterRequest
from lltui.services.launch.session import LaunchSession, Session
from lltui.services.launch.state import LaunchState, RouterView
from lltui.services.launch.watch import LaunchWatch, Poll

Request = LaunchRequest | RouterRequest


class LaunchController:
    """Owns at most one supervised llama-server (or a followed URL) and its watch."""

    def __init__(
        self,
        notify: Callable[[], object],
        latest_sample: Callable[[], RigSample | None],
        *,
        poll_interval_s: float = POLL_INTERVAL_S,
        policy: LaunchPolicy = ANY_LAUNCH,
    ) -> None:
        self.policy = policy
        self._state = LaunchState()
        self._notify = notify
        self._latest_sample = latest_sample
        self._interval = poll_interval_s
        self._session: Session | None = None
        self._watch: LaunchWatch | None = None
        self._generation = 0  # the launch whose watch the state is taken from
        self._last_command: Request | None = None
        self._op = threading.Lock()

    @property
    def state(self) -> LaunchState:
        return self._state

    def _set(self, st: LaunchState, generation: int | None = None) -> None:
        if generation is not None and generation != self._generation:
            return  # a watch of an earlier launch, still saying its last
        self._state = st
        self._notify()

    def _act(self, work: Callable[[], object]) -> None:
        """An action the policy allows, one at a time."""
        if not self._refused():
            with self._op:
                work()

    def start(self, request: Request, *, force: bool = False) -> None:
        """Start a server or a router; one server fit says will not fit is refused
        (``state.refused_plan``) unless ``force`` (a router's loads are gated by its plan)."""
        self._act(lambda: self._start(request, force=force))

    def fail(self, message: str) -> None:
        """A launch that could not even be asked for (a form that does not read): said."""
        with self._op:
            self._stop()
            self._set(LaunchState(phase="error", message=message))

    def force(self) -> None:
        """Start the request fit refused, as asked: it may not fit (only one server's; a
        router's are not refused)."""
        self._act(self._force)

    def _force(self) -> None:
        last = self._last_command
        if isinstance(last, LaunchRequest):
            self._start(last, force=True)

    def follow(self, url: str) -> None:
        """Watch a llama-server started elsewhere: HTTP only, no process of ours."""
        self._act(lambda: self._follow(url))

    def stop(self) -> None:
        self._act(self._stop_and_say)

    def _stop_and_say(self) -> None:
        """Stop our server, or stop following one started elsewhere (it runs on: said)."""
        st = self._state
        followed = self._session is None and st.phase == "following"
        self._stop()
        if followed:
            self._next()  # the closed watch's last word is not taken after this
            self._set(replace(st, phase="idle", health=None, message=f"stopped following {st.url}"))

    def close(self) -> None:
        """On the way out of lltui: nothing of ours outlives it."""
        with self._op:
            self._stop()

    def router_action(self, what: str, name: str) -> None:
        """Load, unload, keep or unkeep a model of the router: a load the plan refuses is
        said, with what to unload."""
        if self._refused():
            return
        session, watch = self._session, self._watch
        if not isinstance(session, RouterSession) or watch is None:
            return
        acted = None  # a load or unload: the note follows the model's state from here
        try:
            if what == "load":
                session.load(name)
                said, acted = f"loading {name}", (what, name)
            elif what == "unload":
                session.unload(name)
                said, acted = f"unloading {name}", (what, name)
            else:
                session.keep(name, what == "keep")
                said = f"{name} {'kept' if what == 'keep' else 'no longer kept'}"
        except RouterRefused as exc:
            said = f"refused: {exc}"
        kept = session.kept

        def tell(st: LaunchState) -> LaunchState:
            view = replace(st.router or RouterView(), note=said, acted=acted)
            rows = tuple(replace(r, kept=r.name in kept) for r in view.rows)
            return replace(st, router=view.following(rows))

        watch.post(tell)

    def _refused(self) -> bool:
        """A read-only app acts on no server: said in the state, and True."""
        if self.policy.allowed:
            return False
        self._set(LaunchState(phase="error", message=self.policy.refusal(()) or ""))
        return True

    def _start(self, request: Request, *, force: bool = False) -> None:
        self._stop()
        generation = self._next()
        router = isinstance(request, RouterRequest)
        words = "starting the router…" if router else "starting llama-server…"
        self._set(LaunchState(phase="starting", message=words))
        self._last_command = request  # what "start anyway" and restart start
        session: Session
        if isinstance(request, RouterRequest):
            session = RouterSession(request, policy=self.policy)
        else:
            session = LaunchSession(request, policy=self.policy)
        try:
            watch = self._watch_of(session, force, generation)
            watch.start()
        except LaunchError as exc:
            session.close()
            warnings = [n.text for n in session.notes if n.level == "warning"]
            self._set(
                LaunchState(
                    phase="error",
                    message="; ".join([str(exc), *warnings]),
                    refused_plan=not router and str(exc).startswith("does not fit"),
                )
            )
            return
        self._session, self._watch = session, watch

    def _watch_of(self, session: Session, force: bool, generation: int) -> LaunchWatch:
        """The session prepared, and a watch of it that asks the server's endpoints (a
        router's: its models too, each loaded model's own server among them)."""
        polls: list[Poll] = []
        router = None
        if isinstance(session, RouterSession):
            session.prepare()
            polls.append(
                RouterPoll(
                    session, interval_s=self._interval, per_model=True, rig=self._latest_sample
                )
            )
            router = RouterView(
                rows=tuple(session.rows(None)), on_demand_url=session.prepared.proxy_url
            )
        else:
            assert isinstance(session, LaunchSession)
            session.prepare(plan="force" if force else "refuse")
        prepared = session.launch
        if prepared.url is not None:  # a UNIX socket has no HTTP here: the log tells
            polls.insert(
                0,
                ServerPoll(
                    prepared.url,
                    prepared.http_key,
                    interval_s=self._interval,
                    whole=router is None,  # a router's own /metrics and /slots need a model
                    rig=self._latest_sample,
                ),
            )
        return LaunchWatch(
            session,
            lambda st: self._set(st, generation),
            state=LaunchState(phase="starting", router=router),
            polls=polls,
            rig=self._latest_sample,
        )

    def _follow(self, url: str) -> None:
        self._stop()
        generation = self._next()
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            url = "http://" + url
        try:
            check_server_url(url)
        except AddressError as exc:
            self._set(LaunchState(phase="error", message=f"follow: {exc}"), generation)
            return
        from lltui.services.follow import ServerFollow

        poll = ServerPoll(
            url,
            None,
            interval_s=self._interval,
            rig=self._latest_sample,
            follow=ServerFollow(url, background=True),
        )
        watch = LaunchWatch(
            None,
            lambda st: self._set(st, generation),
            state=LaunchState(phase="following", url=url, message=f"following {url}"),
            polls=[poll],
        )
        watch.start()
        self._watch = watch

    def _stop(self) -> None:
        """Stop our server (its watch folds how it ended), then the watch."""
        session, watch = self._session, self._watch
        try:
            if session is not None:
                try:
                    session.stop()
                finally:
                    session.close()
        finally:
            if watch is not None:
                watch.close()
            self._session = self._watch = None

    def _next(self) -> int:
        self._generation += 1
        return self._generation
