"""Measure each config in a new process: ``Profiler(fresh_process=True)``, the parent's side.

A server process (``python -m carb_nas.measure._fresh_server``) imports torch and the profiler once,
warms them up on a tiny model, then forks one child per request. The child starts from the
server's heap, clean of large freed buffers, builds a :class:`~carb_nas.measure.Profiler`,
measures the one config and sends its row back, so no measurement inherits freed buffers
from an earlier one (see ``Profiler``). Requests and rows travel as JSON lines over the
server's stdin/stdout; the children write to stderr only. This module never imports the
profiler (the profiler imports it); the server, ``_fresh_server``, does.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

from carb_nas.space import Config

#: the module run as the server (by name: importing it here would import the profiler)
SERVER_MODULE = "carb_nas.measure._fresh_server"


class FreshProcessServer:
    """The parent's handle on the server; started on first use, restarted if it died."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None

    def profile(self, args: dict[str, Any], config: Config) -> dict[str, Any]:
        """The row of ``Profiler(**args).profile(config)`` measured in a fresh process.

        Raises RuntimeError when no row came back (the process or the server died).
        """
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        protocol = dataclasses.asdict(args["protocol"])
        request = {"args": {**args, "protocol": protocol}, "config": config.as_dict()}
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except (BrokenPipeError, OSError) as e:
            raise RuntimeError(f"measuring server died: {e}") from None
        if not line:
            raise RuntimeError(f"measuring server died (exit status {self._proc.poll()})")
        reply = json.loads(line)
        if "row" not in reply:
            raise RuntimeError(reply.get("error", "no row from the measuring process"))
        return reply["row"]

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
