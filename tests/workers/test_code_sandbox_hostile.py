"""The hostile corpus (issue 17): every program is contained, scores 0, and leaves nothing
behind on the host: no process, no file, nothing received by the host's listeners.

These run the real bubblewrap sandbox. Where it cannot be set up they fail (the reward
refuses to start), never skip."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from pathlib import Path

import pytest
from sandbox_corpus import ESCAPED_REFERENCE, HOSTILE
from test_reward_time_limit import leftover_sandbox_processes

from flywheel.config.schema import CodeSandboxArgs, RewardConfig
from flywheel.sandbox.bwrap import UID_BASE, UID_SPAN
from flywheel.workers.rewards.registry import reward_fn

# Tight limits keep the corpus quick: the slowest programs run into the 2 s wall clock.
LIMITS = CodeSandboxArgs(test_timeout_s=2.0, cpu_seconds=1, memory_mb=256, max_processes=16,
                         max_file_mb=4, max_open_files=64)
MARKS = [Path(p) / "ESCAPED_MARK" for p in ("/work/main", "/usr", "/", "/etc", "/root")]


class HostListeners:
    """A TCP, a UDP and an abstract unix listener on the host, recording what arrives."""

    def __init__(self):
        self.received: list[bytes] = []
        self.closed = False
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.abstract = f"flywheel-sandbox-test-{os.getpid()}"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind("\0" + self.abstract)
        self.unix.listen()
        for sock in (self.tcp, self.udp, self.unix):
            sock.settimeout(0.2)
            threading.Thread(target=self._listen, args=(sock,), daemon=True).start()

    def _listen(self, sock: socket.socket) -> None:
        while not self.closed:
            try:
                if sock.type == socket.SOCK_DGRAM:
                    data, sender = sock.recvfrom(100)
                    self.received.append(data)
                    sock.sendto(b"ACK", sender)
                else:
                    conn, _ = sock.accept()
                    self.received.append(b"connection " + conn.recv(100))
            except (TimeoutError, OSError):
                continue

    def close(self) -> None:
        self.closed = True
        for sock in (self.tcp, self.udp, self.unix):
            sock.close()


@pytest.fixture(scope="module")
def host():
    listeners = HostListeners()
    with tempfile.NamedTemporaryFile("w", prefix="flywheel-secret-") as secret:
        secret.write("the worker's secret")
        secret.flush()
        os.environ["FLYWHEEL_SANDBOX_TEST_SECRET"] = "s3cret"  # must not reach programs
        yield listeners, {"{port}": str(listeners.tcp.getsockname()[1]),
                          "{udp_port}": str(listeners.udp.getsockname()[1]),
                          "{abstract}": listeners.abstract, "{host_pid}": str(os.getpid()),
                          "{secret_path}": secret.name}
        os.environ.pop("FLYWHEEL_SANDBOX_TEST_SECRET")
    listeners.close()


@pytest.fixture(scope="module")
def code_reward():
    return reward_fn("code_sandbox", RewardConfig(reward_type="code_sandbox",
                                                  code_sandbox=LIMITS))


def files_owned_by_sandboxes(*dirs: str) -> list[str]:
    return [str(p) for d in dirs for p in Path(d).iterdir()
            if UID_BASE <= p.lstat().st_uid < UID_BASE + UID_SPAN]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(name, host, code_reward):
    listeners, fill = host
    program = HOSTILE[name][0]
    for key, value in fill.items():
        program = program.replace(key, value)
    result = code_reward("q", f"```python\n{program}\n```", ESCAPED_REFERENCE)
    assert result.score == 0.0, result.metadata
    assert result.metadata["parsed"] and result.metadata["passed"] == 0
    assert leftover_sandbox_processes() == {}
    assert listeners.received == []
    assert not any(mark.exists() for mark in MARKS)
    assert files_owned_by_sandboxes("/tmp", "/dev/shm") == []


def test_corpus_is_large_enough_and_a_working_program_still_passes(host, code_reward):
    assert len(HOSTILE) >= 25
    honest = "```python\nprint('ESCAPED')\n```"  # the reference's own answer scores 1
    assert code_reward("q", honest, ESCAPED_REFERENCE).score == 1.0
