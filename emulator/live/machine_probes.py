"""The child processes of `calibrate --machine` (emulator/worker/machine_probe.py), started as the
live launcher starts workers: `python -m` from the repository root with one compute thread; each
answers one JSON line per command. Starting, asking and stopping them; what to ask is
machine_profile.py's.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import IO, Any

from emulator.errors import CalibrationError
from emulator.live.launcher import ONE_THREAD_ENV
from emulator.paths import REPO_ROOT

MAX_ANSWER_BYTES = 1 << 20
LOAD_TIMEOUT_S = 120.0  # importing torch and building the model, with every probe starting at once
STOP_TIMEOUT_S = 5.0


class ProbeProcess:
    """One probe: a process, a thread that reads its answers into a queue, and its stderr in a
    temporary file (its last line explains a failure)."""

    def __init__(self, name: str, preset: str, size: str, seed: int) -> None:
        self.name = name
        self.ready: dict[str, Any] = {}  # its first answer: pid, nice level, torch threads
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "emulator.worker.machine_probe"], cwd=REPO_ROOT,
            env={**os.environ, **ONE_THREAD_ENV}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True)
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"probe-{name}", daemon=True)
        self._reader.start()
        self.send({"op": "load", "preset": preset, "size": size, "seed": seed})

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None  # opened with PIPE
        while line := stdout.readline(MAX_ANSWER_BYTES + 1):
            self._answers.put(line)
        self._answers.put(None)

    def send(self, cmd: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(cmd) + "\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise CalibrationError(f"probe {self.name}: exited before {cmd.get('op')}; {self._why()}") from None

    def answer(self, timeout_s: float) -> dict[str, Any]:
        """The next answer; CalibrationError when the probe failed, exited or took longer than
        `timeout_s`."""
        try:
            line = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            raise CalibrationError(f"probe {self.name}: no answer within {timeout_s:g} s; the machine "
                                   "may be overloaded, try again when it is quieter") from None
        if line is None:
            raise CalibrationError(f"probe {self.name}: exited; {self._why()}")
        if len(line) > MAX_ANSWER_BYTES:
            raise CalibrationError(f"probe {self.name}: an answer over {MAX_ANSWER_BYTES:,} bytes")
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise CalibrationError(f"probe {self.name}: answered {line[:80]!r}, not a JSON object")
        if "error" in doc:
            raise CalibrationError(f"probe {self.name}: {doc['error']}")
        return doc

    def ask(self, cmd: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.send(cmd)
        return self.answer(timeout_s)

    def _why(self) -> str:
        """The last line the probe wrote to stderr, or its exit status."""
        self._stderr.seek(0)
        lines = self._stderr.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
        code = self.proc.poll()
        return lines[-1] if lines else f"exit status {code}"

    def close(self) -> None:
        """Ask it to quit; kill it (this process's own child, by its pid) if it does not."""
        if self.proc.poll() is None:
            try:
                self.send({"op": "quit"})
                self.proc.wait(STOP_TIMEOUT_S)
            except (CalibrationError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


@contextmanager
def started_probes(count: int, preset: str, size: str, seed: int) -> Iterator[list[ProbeProcess]]:
    """`count` probes, all loaded (each has said it is ready) before any is asked to time anything,
    so a probe still importing torch never shares the CPU with a measurement; all stopped after."""
    with ExitStack() as stack:
        probes = []
        for i in range(count):
            probe = ProbeProcess(f"{i}", preset, size, seed)
            stack.callback(probe.close)
            probes.append(probe)
        for probe in probes:
            probe.ready = probe.answer(LOAD_TIMEOUT_S)
        yield probes
