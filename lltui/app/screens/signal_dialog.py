"""The confirmation before a signal: TERM first, KILL only once TERM was sent, the process
is still there (checked again and again while the dialog is open) and the user confirms
again. On a simulated, replayed or remote rig it says so and signals nothing."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.timer import Timer
from textual.widgets import Button, Static

from lltui.app.app_protocol import host_of
from lltui.app.screens.base import WarningDialog
from lltui.core.cmdline.secrets import redact_command
from lltui.core.monitor.signals import ProcessIdentity
from lltui.core.text import one_line
from lltui.services.signals import send_signal, still_running

ASK, TERMED, EXITED, REFUSED = "ask", "termed", "exited", "refused"
RECHECK_S = 0.25  # after SIGTERM: how often the dialog looks whether the process is gone


class SignalDialog(WarningDialog[None]):
    """Names the pid, its user and command; ``t`` TERM, then ``k`` KILL; ``escape`` cancels.

    ``target`` is the process checked when the dialog opened (None with ``refusal``, the
    line that says why nothing is signalled here)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "term", "TERM", id="signal-term"),
        Binding("k", "kill", "KILL", id="signal-kill"),
        Binding("escape,n", "cancel", "Cancel", id="signal-cancel"),
    ]

    DEFAULT_CSS = """
    SignalDialog > .dialog-box {
        width: 72;
    }
    SignalDialog .dialog-buttons Button {
        min-width: 10;
    }
    """

    def __init__(
        self,
        pid: int,
        user: str,
        command: str,
        target: ProcessIdentity | None,
        refusal: str | None = None,
        *,
        group: tuple[ProcessIdentity, ...] = (),
    ) -> None:
        super().__init__()
        self.pid = pid
        self.user = user
        self.command = command
        self.target = target
        self.refusal = refusal
        # tagged processes signalled together (each checked when the dialog opened)
        self.group = group if len(group) > 1 else ()
        self.state = REFUSED if target is None else ASK
        self.rechecks = 0  # looks after SIGTERM at whether the process is still there
        self._rechecking: Timer | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="signal-box", classes="dialog-box"):
            yield Static(self._text(), id="signal-text", classes="dialog-text")
            with Horizontal(id="signal-buttons", classes="dialog-buttons"):
                if self.state == ASK:
                    yield Button("TERM (t)", id="signal-term", variant="warning")
                    yield Button("KILL (k)", id="signal-kill", variant="error")
                yield Button(self._cancel_label(), id="signal-cancel")

    def on_mount(self) -> None:
        self._sync_buttons()

    def _text(self) -> str:
        if self.group:
            return self._group_text()
        shown = one_line(redact_command(self.command))
        command = shown if len(shown) <= 200 else shown[:199] + "…"
        who = (
            f"[b]pid {self.pid}[/b]  user [b]{escape(self.user)}[/b]\n"
            f"[$text-muted]{escape(command)}[/]"
        )
        if self.state == REFUSED:
            return f"{who}\n\n{escape(self.refusal or 'no signal can be sent')}"
        if self.state == EXITED:
            return f"{who}\n\n[$gpu-ok]It exited after SIGTERM.[/] Nothing more to send."
        if self.state == TERMED:
            return (
                f"{who}\n\nSIGTERM sent; it is still running. If it does not exit, send"
                " [b]SIGKILL[/b]? (it cannot clean up: a llama-server loses its slots and cache)"
            )
        return f"Send [b]SIGTERM[/b] to\n{who}"

    def _group_text(self) -> str:
        who = "\n".join(
            f"[b]pid {t.pid}[/b] {escape(t.user)}  "
            f"[$text-muted]{escape(one_line(redact_command(t.command))[:60])}[/]"
            for t in self.group[:8]
        )
        more = f"\n… and {len(self.group) - 8} more" if len(self.group) > 8 else ""
        n = len(self.group)
        if self.state == EXITED:
            return f"{who}{more}\n\n[$gpu-ok]They exited after SIGTERM.[/] Nothing more to send."
        if self.state == TERMED:
            return (
                f"{who}{more}\n\nSIGTERM sent to {n} processes. Send [b]SIGKILL[/b] to those left?"
            )
        return f"Send [b]SIGTERM[/b] to the {n} tagged processes\n{who}{more}"

    def _cancel_label(self) -> str:
        return "Cancel (esc)" if self.state == ASK else "Close (esc)"

    def _sync_buttons(self) -> None:
        if self.state == REFUSED:
            return
        kill = self.query_one("#signal-kill", Button)
        term = self.query_one("#signal-term", Button)
        cancel = self.query_one("#signal-cancel", Button)
        kill.display = self.state == TERMED
        term.display = self.state == ASK
        cancel.label = self._cancel_label()
        {ASK: term, TERMED: kill}.get(self.state, cancel).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "term":
            return self.state == ASK
        if action == "kill":
            return self.state == TERMED
        return True

    def _targets(self) -> tuple[ProcessIdentity, ...]:
        """The process (or the tagged ones) checked at opening."""
        assert self.target is not None
        return self.group or (self.target,)

    def _send(self, name: str, targets: tuple[ProcessIdentity, ...]) -> bool:
        """Send SIG``name`` to ``targets``; say what happened."""
        if host_of(self).readonly:  # refused where it is done, not only where it is shown
            self.app.notify("read-only: no signal is sent from this app", severity="error")
            return False
        sent = False
        for target in targets:
            outcome = send_signal(target, name)
            self.app.notify(outcome.message, severity="information" if outcome.sent else "error")
            sent = sent or outcome.sent
        return sent

    def action_term(self) -> None:
        if self.state != ASK:
            return
        if not self._send("TERM", self._targets()):
            self.dismiss()
            return
        self.state = TERMED
        self._recheck()  # one that exits at once is never offered a KILL
        if self.state == TERMED:
            self._rechecking = self.set_interval(RECHECK_S, self._recheck)
            self._show_state()

    def _left(self) -> tuple[ProcessIdentity, ...]:
        """Those of the targets still running."""
        return tuple(t for t in self._targets() if still_running(t))

    def _recheck(self) -> None:
        """After SIGTERM: once the process (every tagged one) is gone, say so, offer no
        KILL and look no more."""
        if self.state != TERMED or self.target is None:
            return
        self.rechecks += 1
        if not self._left():
            self.state = EXITED
            if self._rechecking is not None:
                self._rechecking.stop()
            self._show_state()

    def _show_state(self) -> None:
        self.query_one("#signal-text", Static).update(self._text())
        self._sync_buttons()

    def action_kill(self) -> None:
        if self.state != TERMED:
            return
        left = self._left()
        if not left:
            self._recheck()
            return  # it exited a moment ago: the dialog says so, nothing is sent
        self._send("KILL", left)
        self.dismiss()

    def action_cancel(self) -> None:
        self.dismiss()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "signal-term":
            self.action_term()
        elif event.button.id == "signal-kill":
            self.action_kill()
        else:
            self.action_cancel()
