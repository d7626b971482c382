"""A real MQTT broker for the live twin's tests: mosquitto where installed, else amqtt (test extra).

The broker runs as a subprocess bound to 127.0.0.1 on a free port, is waited for with a timeout, and can
be stopped and started again on the same port (the "broker goes away and comes back" tests). Never a
mock. mosquitto runs without persistence, so a restart loses its sessions as a crash would; the clients
subscribe again on reconnection.

The brokers differ in one thing the tests need: mosquitto sends a persistent session's unacknowledged
QoS 1 messages again when the client reconnects (MQTT 3.1.1 section 4.4); amqtt 0.12.1 discards them when
the client disconnects or does not acknowledge within 5 s (only messages published while the client was
away are kept). ``Broker.redelivers_unacked`` says which.

amqtt keeps no messages for anonymous sessions, so it is configured to require a user name (any) and the
tests connect as :data:`USER`. ``TWINFER_TEST_BROKER=amqtt`` picks amqtt even where mosquitto is installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

USER = "twinfer-test"
"""User name the tests connect with (amqtt keeps sessions only for named users)."""

START_TIMEOUT = 15.0
"""Seconds a broker may take to accept connections."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    """An MQTT broker subprocess on 127.0.0.1:``port``.

    Args:
        folder: where its configuration and log go.
        kind: ``"mosquitto"`` or ``"amqtt"``; None picks mosquitto when ``shutil.which`` finds it.

    """

    def __init__(self, folder: Path, kind: str | None = None) -> None:
        mosquitto = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")
        self.kind = kind or os.environ.get("TWINFER_TEST_BROKER") or ("mosquitto" if mosquitto else "amqtt")
        self.host = "127.0.0.1"
        self.port = free_port()
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log = self.folder / f"{self.kind}.log"
        self._process: subprocess.Popen[bytes] | None = None
        if self.kind == "mosquitto":
            if mosquitto is None:
                raise RuntimeError("mosquitto: expected it on PATH; received none")
            config = self.folder / "mosquitto.conf"
            config.write_text(
                f"listener {self.port} {self.host}\nallow_anonymous true\npersistence false\n"
                "log_dest stderr\n"
            )
            self._command = [mosquitto, "-c", str(config)]
        elif self.kind == "amqtt":
            config = self.folder / "amqtt.yaml"
            config.write_text(
                "listeners:\n  default:\n    type: tcp\n"
                f"    bind: {self.host}:{self.port}\n"
                "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n    allow_anonymous: false\n"
            )
            self._command = [sys.executable, "-m", "amqtt.scripts.broker_script", "-c", str(config)]
        else:
            raise ValueError(f"kind: expected 'mosquitto' or 'amqtt'; received {kind!r}")

    @property
    def protocol(self) -> str:
        """The MQTT version the clients use: 5 with mosquitto; amqtt speaks only 3.1.1."""
        return "5" if self.kind == "mosquitto" else "3.1.1"

    @property
    def redelivers_unacked(self) -> bool:
        """Whether a reconnecting persistent session gets its unacknowledged messages again."""
        return self.kind == "mosquitto"

    def _accepts(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.2):
            return True
        return False

    def start(self) -> None:
        """Start the broker and wait until it accepts connections."""
        if self._process is not None:
            raise RuntimeError("broker: expected a stopped broker; received a running one")
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(self._command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not self._accepts():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self.kind} on port {self.port}: expected it to accept connections within "
                    f"{START_TIMEOUT:g} s; received none. Log:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 5 s)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@contextlib.contextmanager
def running_broker(folder: Path, kind: str | None = None) -> Iterator[Broker]:
    """A started :class:`Broker`, stopped on exit."""
    broker = Broker(folder, kind)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def publish(broker: Broker, topic: str, payloads: list[bytes | str], *, qos: int = 1) -> None:
    """Publish ``payloads`` in order as a separate client and wait until the broker has each one."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"publisher-{time.monotonic_ns()}")
    client.username_pw_set(USER)
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        for payload in payloads:
            client.publish(topic, payload, qos=qos).wait_for_publish(timeout=5)
    finally:
        client.disconnect()
        client.loop_stop()
