"""The broker as a client of another broker (replica fetchers): a connection to the other
broker's inter-broker listener, through TLS and SASL (PLAIN, SCRAM or GSSAPI) when that listener uses
them, as Kafka's inter-broker clients do (security.inter.broker.protocol /
inter.broker.listener.name, sasl.mechanism.inter.broker.protocol)."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Awaitable, Callable

import trio

from kafkacompat.security.mechanisms import GSSAPI, PLAIN
from kafkacompat.security.scram import ScramClient, ScramError
from kafkacompat.wire import codec

if TYPE_CHECKING:
    from kafkacompat.config import BrokerConfig

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
Request = Callable[..., Awaitable[memoryview]]


class InterBrokerAuthenticationError(ConnectionError):
    pass


_CONTEXTS: dict[int, tuple["BrokerConfig", ssl.SSLContext]] = {}  # id(config) -> (config, context), built once


def _client_context(config: "BrokerConfig") -> ssl.SSLContext:
    cached = _CONTEXTS.get(id(config))
    if cached is None or cached[0] is not config:
        from kafkacompat.security.tls import client_context

        cached = _CONTEXTS[id(config)] = (config, client_context(config, config.inter_broker_listener.name))
    return cached[1]


async def open_broker_stream(config: "BrokerConfig", host: str, port: int) -> trio.abc.Stream:
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    if config.inter_broker_listener.uses_tls:
        tls = trio.SSLStream(stream, _client_context(config), server_hostname=host)
        try:
            await tls.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return tls
    return stream


async def authenticate(config: "BrokerConfig", request: Request, host: str) -> None:
    """SaslHandshake v1 and SaslAuthenticate v1 with the broker's own inter-broker credentials
    (for GSSAPI a ticket for the service on ``host``, the other broker); nothing on a listener
    without SASL."""
    from kafkacompat.security.listeners import inter_broker_credentials

    credentials = inter_broker_credentials(config)
    if credentials is None:
        return
    mechanism, username, password = credentials
    handshake = codec.request_class(SASL_HANDSHAKE)(mechanism=mechanism)
    answer = codec.decode_response(SASL_HANDSHAKE, 1, await request(
        SASL_HANDSHAKE, 1, codec.encode_request(handshake, 1), flexible_header=False, flexible_response=False))
    if answer.error_code:
        raise InterBrokerAuthenticationError(
            f"the broker refused SASL mechanism {mechanism} (error {answer.error_code}; it serves {answer.mechanisms})")
    if mechanism == PLAIN:
        await _token(request, f"\x00{username}\x00{password}".encode())
        return
    if mechanism == GSSAPI:
        await _gssapi(config, request, username, password, host)
        return
    client = ScramClient(mechanism, username, password)
    server_first = await _token(request, client.first())
    server_final = await _token(request, client.final(server_first))
    try:
        client.verify(server_final)
    except ScramError as exc:
        raise InterBrokerAuthenticationError(f"SCRAM: {exc}") from None


async def _gssapi(config: "BrokerConfig", request: Request, principal: str, keytab: str, host: str) -> None:
    from kafkacompat.security.gssapi_sasl import GssapiUnavailable, gssapi_login

    listener = config.inter_broker_listener.name
    service = (config.listener_value(listener, "sasl.kerberos.service.name", GSSAPI)
               or principal.split("/", 1)[0].split("@", 1)[0])
    try:
        await gssapi_login(lambda token: _token(request, token), principal, keytab or None, service, host)
    except (GssapiUnavailable, ValueError) as exc:
        raise InterBrokerAuthenticationError(str(exc)) from None


async def _token(request: Request, token: bytes) -> bytes:
    message = codec.request_class(SASL_AUTHENTICATE)(auth_bytes=token)
    answer = codec.decode_response(SASL_AUTHENTICATE, 1, await request(
        SASL_AUTHENTICATE, 1, codec.encode_request(message, 1), flexible_header=False, flexible_response=False))
    if answer.error_code:
        raise InterBrokerAuthenticationError(
            f"SASL authentication failed (error {answer.error_code}): {answer.error_message}")
    return bytes(answer.auth_bytes)
