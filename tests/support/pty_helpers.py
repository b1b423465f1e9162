"""A child process on a new pseudo-terminal of a given size, as its controlling terminal:
for the tests that drive a real terminal app and for the idle CPU bench."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import termios


def spawn_in_pty(
    argv: list[str], env: dict[str, str], size: tuple[int, int]
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` on a new pty of ``size`` (columns, rows); the child and the master
    side's descriptor (the caller reads the child's output from it, and closes it)."""
    cols, rows = size
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def controlling_tty() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        child = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=controlling_tty,  # the caller runs no threads of its own then
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return child, master
