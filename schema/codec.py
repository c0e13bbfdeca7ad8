"""Encoders and typed decoders for every bus message, built once (msgspec perf tips).

JSON rather than msgpack: messages stay readable in ``nats stream view`` and replay exports, and
msgspec's JSON is fast enough that the codec is never the bottleneck (see bench/RESULTS.md).

Every decoder checks the bytes against ``schema.bounds`` first: a message from the bus is untrusted, and
one nested deeply enough raises ``RecursionError`` inside msgspec or in whatever walks it later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from schema.bounds import check_bounds
from schema.messages import BusInput, CommandBatch, CommandResult, DeadLetter, ResultBatch, ResultMessage

_encoder: Final = msgspec.json.Encoder()
_input_decoder: Final[msgspec.json.Decoder[BusInput]] = msgspec.json.Decoder(BusInput)
_batch_decoder: Final[msgspec.json.Decoder[CommandBatch]] = msgspec.json.Decoder(CommandBatch)
_result_decoder: Final[msgspec.json.Decoder[ResultMessage]] = msgspec.json.Decoder(ResultMessage)
_deadletter_decoder: Final[msgspec.json.Decoder[DeadLetter]] = msgspec.json.Decoder(DeadLetter)


def encode(message: msgspec.Struct) -> bytes:
    """Encode any bus message as JSON."""
    return _encoder.encode(message)


def encode_result_batch(encoded: Sequence[bytes]) -> bytes:
    """A :class:`ResultBatch` of results each already encoded with :func:`encode`, without encoding them
    again (the same bytes as encoding the batch of the results themselves)."""
    raw = tuple(msgspec.Raw(one) for one in encoded)
    return _encoder.encode(ResultBatch(results=raw))  # type: ignore[arg-type]  # Raw stands for the result


def decode_input(data: bytes) -> BusInput:
    """Decode a message of the events stream.

    Raises:
        schema.bounds.TooComplex: too large or too deep to decode (the caller dead-letters it).
        msgspec.DecodeError / msgspec.ValidationError: malformed (the caller dead-letters it).
    """
    check_bounds(data)
    return _input_decoder.decode(data)


def decode_batch(data: bytes) -> CommandBatch:
    """Decode a command batch (raises like :func:`decode_input`)."""
    check_bounds(data)
    return _batch_decoder.decode(data)


def decode_results(data: bytes) -> tuple[CommandResult, ...]:
    """Decode a message of the results stream into the results it holds (raises like :func:`decode_input`)."""
    check_bounds(data)
    message = _result_decoder.decode(data)
    return message.results if isinstance(message, ResultBatch) else (message,)


def decode_deadletter(data: bytes) -> DeadLetter:
    """Decode a dead letter (raises like :func:`decode_input`)."""
    check_bounds(data)
    return _deadletter_decoder.decode(data)
