"""Structured JSON logs with the trace id; secrets are redacted before anything is written.

Every record becomes one JSON line with ``ts``, ``level``, ``logger``, ``msg``, the current ``trace_id``
and any ``extra`` fields (``raybus.key`` ...). A redaction pass removes bearer tokens, passwords in URLs
and ``password=``/``token=`` pairs, as a last line of defence: code should never log them anyway.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from schema.times import format_time_ms
from services.runtime.tracing import current_trace_id

_REDACTIONS = (
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1[redacted]"),
    (re.compile(r"(?i)(://[^:/@\s]+:)[^@\s]+@"), r"\1[redacted]@"),
    (
        re.compile(r"(?i)((?:password|passwd|token|secret|auth_token)[\"']?\s*[=:]\s*[\"']?)[^\s,\"'}]+"),
        r"\1[redacted]",
    ),
)

_STANDARD = set(vars(logging.makeLogRecord({})))


def redact(text: str) -> str:
    """Remove credentials from a log line."""
    for pattern, replacement in _REDACTIONS:
        text = pattern.sub(replacement, text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": format_time_ms(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        trace_id = current_trace_id()
        if trace_id:
            payload["trace_id"] = trace_id
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                payload[name] = value if isinstance(value, int | float | bool) else redact(str(value))
        if record.exc_info:
            payload["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(payload, default=str)


def setup_logging(level: str = "INFO") -> None:
    """Send JSON logs to stderr at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "kubernetes.client.rest", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
