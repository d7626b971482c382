"""The one way the live twin's MQTT source and sink make a paho-mqtt client.

Both keep a persistent session under a fixed client id: the broker keeps the session's subscriptions
and its undelivered QoS 1/2 messages while the twin is down. MQTT 5 (the default) asks for it with
``clean_start=False`` and a Session Expiry Interval (MQTT 5.0 sections 3.1.2.4 and 3.1.2.11.2), and
announces a Receive Maximum of 65535 (section 3.1.2.11.3): a source acknowledges messages only when the
twin snapshots, and a broker sends no more unacknowledged messages than that (MQTT 3.1.1 has no such
field, and brokers use their own small limit, mosquitto's ``max_inflight_messages`` of 20, which stalls
such a source after 20 messages until its next commit). MQTT 3.1.1 (``protocol="3.1.1"``, for brokers
without MQTT 5) asks with ``clean_session=False`` (section 3.1.2.4).

paho's own network thread reconnects after a lost connection with a delay doubling from 1 s up to
:data:`RECONNECT_MAX_S`. The connection state is tracked by callbacks and read through
:class:`Connection`.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Literal

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from twinfer.errors import TwinferRuntimeError, TwinferValueError

RECONNECT_MAX_S = 8
"""Longest wait (s) between two reconnection attempts: a broker back after a restart is found quickly."""


MqttVersion = Literal["5", "3.1.1"]

SESSION_EXPIRY_S = 7 * 24 * 3600
"""How long (s) an MQTT 5 broker keeps a session after its client went away: a week."""

RECEIVE_MAXIMUM = 65535
"""Unacknowledged QoS 1/2 messages an MQTT 5 broker may send the client: the protocol's largest."""


def check_qos(qos: object) -> int:
    """``qos`` as an int of 0, 1 or 2; a TwinferValueError naming the field otherwise."""
    if isinstance(qos, bool) or qos not in (0, 1, 2):
        raise TwinferValueError(f"qos: expected 0, 1 or 2; received {qos!r}")
    return int(qos)  # type: ignore[arg-type]


class Connection:
    """A paho client of a fixed id, connected in the background, with its connection state.

    Args:
        host: broker host name or address.
        port: broker TCP port.
        client_id: the fixed client id under which the broker keeps the session.
        manual_ack: acknowledge received QoS 1/2 messages only through ``client.ack`` (a source).
        username: user name sent at connect (brokers that keep sessions only for known users need one).
        password: password sent with ``username``.
        on_connect: called on paho's thread after every successful (re)connection, with the client and
            whether the broker still had the session (``session_present``).
        subscribe: ``(topic filter, qos)`` subscribed to after every (re)connection (a restarted broker
            may have lost the session); :meth:`wait_connected` waits for the broker's acknowledgement.
        on_message: paho's message callback, set before the connection starts (a persistent session's
            messages may come right after the connection is acknowledged).
        protocol: ``"5"`` (MQTT 5.0) or ``"3.1.1"``.

    """

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        *,
        manual_ack: bool,
        username: str | None = None,
        password: str | None = None,
        on_connect: Any = None,
        subscribe: tuple[str, int] | None = None,
        on_message: Any = None,
        protocol: MqttVersion = "5",
    ) -> None:
        if not isinstance(host, str) or not host:
            raise TwinferValueError(f"host: expected a host name or address; received {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise TwinferValueError(f"port: expected an integer in 1..65535; received {port!r}")
        if not isinstance(client_id, str) or not client_id:
            raise TwinferValueError(
                f"client_id: expected a non-empty fixed id (the broker keeps the session under it); "
                f"received {client_id!r}"
            )
        if protocol not in ("5", "3.1.1"):
            raise TwinferValueError(
                f"protocol: expected '5' or '3.1.1' (MQTT versions); received {protocol!r}"
            )
        self.address = f"{host}:{port}"
        self._ready = threading.Event()  # connected, and subscribed where asked
        self._subscribe = subscribe
        self._user_on_connect = on_connect
        self.last_error = ""
        v5 = protocol == "5"
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=None if v5 else False,
            protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
            manual_ack=manual_ack,
        )
        if username is not None:
            client.username_pw_set(username, password)
        client.reconnect_delay_set(min_delay=1, max_delay=RECONNECT_MAX_S)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        if on_message is not None:
            client.on_message = on_message
        self.client = client
        if v5:
            properties = Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = SESSION_EXPIRY_S
            properties.ReceiveMaximum = RECEIVE_MAXIMUM
            client.connect_async(host, port, clean_start=False, properties=properties)
        else:
            client.connect_async(host, port)
        client.loop_start()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            self.last_error = f"the broker at {self.address} refused the connection: {reason}"
            return
        if self._user_on_connect is not None:
            self._user_on_connect(client, bool(flags.session_present))
        if self._subscribe is None:
            self._ready.set()
        else:
            client.subscribe(self._subscribe[0], qos=self._subscribe[1])

    def _on_subscribe(self, client: Any, userdata: Any, mid: Any, reasons: Any, properties: Any) -> None:
        failed = [str(r) for r in reasons if r.is_failure]
        if failed:
            topic = self._subscribe[0] if self._subscribe else None
            self.last_error = f"the broker at {self.address} refused the subscription to {topic!r}: {failed}"
        else:
            self._ready.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._ready.clear()
        self.last_error = f"disconnected from the broker at {self.address}: {reason}"

    @property
    def connected(self) -> bool:
        """Whether the client is connected to the broker now (and subscribed, where it subscribes)."""
        return self._ready.is_set()

    def wait_connected(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` seconds for the first connection and subscription (None: do not wait).

        Raises:
            TwinferRuntimeError: not connected in time; names the broker and the last reason known.

        """
        if timeout is None:
            return
        deadline = time.monotonic() + timeout
        while not self._ready.wait(min(0.05, max(deadline - time.monotonic(), 0.0))):
            if time.monotonic() >= deadline:
                self.close()
                raise TwinferRuntimeError(
                    f"connect_timeout: expected a connection to the MQTT broker at {self.address} "
                    f"{'and a subscription ' if self._subscribe else ''}within "
                    f"{timeout:g} s; received none ({self.last_error or 'no answer'}): is the broker running?"
                )

    def close(self) -> None:
        """Disconnect cleanly (the broker keeps the session) and stop the network thread."""
        self.client.disconnect()
        self.client.loop_stop()
        self._ready.clear()
