"""Encoders and typed decoders for every bus message, built once (msgspec perf tips).

JSON rather than msgpack: messages stay readable in ``nats stream view`` and replay exports, and
msgspec's JSON is fast enough that the codec is never the bottleneck (see bench/RESULTS.md).
"""

from __future__ import annotations

from typing import Final

import msgspec

from schema.messages import BusInput, CommandBatch, CommandResult, DeadLetter

_encoder: Final = msgspec.json.Encoder()
_input_decoder: Final[msgspec.json.Decoder[BusInput]] = msgspec.json.Decoder(BusInput)
_batch_decoder: Final[msgspec.json.Decoder[CommandBatch]] = msgspec.json.Decoder(CommandBatch)
_result_decoder: Final[msgspec.json.Decoder[CommandResult]] = msgspec.json.Decoder(CommandResult)
_deadletter_decoder: Final[msgspec.json.Decoder[DeadLetter]] = msgspec.json.Decoder(DeadLetter)


def encode(message: msgspec.Struct) -> bytes:
    """Encode any bus message as JSON."""
    return _encoder.encode(message)


def decode_input(data: bytes) -> BusInput:
    """Decode a message of the events stream.

    Raises:
        msgspec.DecodeError / msgspec.ValidationError: malformed (the caller dead-letters it).
    """
    return _input_decoder.decode(data)


def decode_batch(data: bytes) -> CommandBatch:
    """Decode a command batch."""
    return _batch_decoder.decode(data)


def decode_result(data: bytes) -> CommandResult:
    """Decode a command result."""
    return _result_decoder.decode(data)


def decode_deadletter(data: bytes) -> DeadLetter:
    """Decode a dead letter."""
    return _deadletter_decoder.decode(data)
