"""One program of the control plane as a child process: started with its output in a log file, stopped by
SIGTERM and, past a grace period, SIGKILL, always waited for so no process outlives the plane."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from realkube.errors import RealKubeError

STOP_GRACE = 15.0
LOG_TAIL_LINES = 40


class Program:
    """A named child process logging to ``log``."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process (its own session, so a terminal's Ctrl-C reaches only the plane's owner, which
        stops the programs in order)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            try:
                self._process = subprocess.Popen(
                    self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            except OSError as exc:
                raise RealKubeError(f"{self.name} did not start: {exc}") from exc

    @property
    def pid(self) -> int | None:
        """The process id while started."""
        return None if self._process is None else self._process.pid

    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self._process is not None and self._process.poll() is None

    def exited(self) -> str | None:
        """A sentence saying how the process ended, with its log's tail; None while it runs (or before start)."""
        if self._process is None or self._process.poll() is None:
            return None
        return f"{self.name} exited with status {self._process.returncode}; the end of {self.log}:\n{self.log_tail()}"

    def log_tail(self) -> str:
        """The last lines of the log."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Terminate the process, kill it if it outlives ``grace`` seconds, and reap it. Idempotent."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
