"""What ``redis-tasks check`` found: findings, the report, and how both are printed.

A finding is one line for an operator: a level (``ok``, ``warn``, ``error``), a
topic, what was seen, and, unless it is fine, how to fix it. The same findings
print as text or as one JSON document, and neither ever holds the URL's password.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

__all__ = ["LEVELS", "Finding", "Level", "Report", "redact", "scrub"]

#: A finding's level: ``error`` makes the Redis not ready, ``warn`` does not.
Level = Literal["ok", "warn", "error"]
#: The levels, mildest first.
LEVELS: Final[tuple[Level, ...]] = ("ok", "warn", "error")


@dataclass(frozen=True)
class Finding:
    """One thing ``check`` found: its ``level``, ``topic``, ``message`` and ``fix``."""

    level: Level
    topic: str
    message: str
    fix: str = ""
    #: Figures behind the message, for ``--json`` readers (never a secret).
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The finding as one line of text."""
        text = f"{self.level:<5}  {self.topic}: {self.message.rstrip('.')}"
        return f"{text}. Fix: {self.fix}" if self.fix else text

    def to_json(self) -> dict[str, Any]:
        """The finding as a JSON object."""
        found: dict[str, Any] = {"level": self.level, "topic": self.topic}
        found["message"] = self.message
        found["fix"] = self.fix or None
        found["data"] = self.data
        return found


@dataclass
class Report:
    """Every finding about one Redis (``target`` is its URL without credentials)."""

    target: str
    prefix: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Whether the Redis is ready: no finding is an error (warnings are allowed)."""
        return all(finding.level != "error" for finding in self.findings)

    def count(self, level: Level) -> int:
        """How many findings have ``level``."""
        return sum(finding.level == level for finding in self.findings)

    def verdict(self) -> str:
        """The closing line: ready or not, and how many errors and warnings."""
        errors, warnings = self.count("error"), self.count("warn")
        plural = "" if warnings == 1 else "s"
        if errors:
            return (
                f"not ready: {errors} error{'' if errors == 1 else 's'}, {warnings} warning{plural}"
            )
        return f"ready ({warnings} warning{plural})" if warnings else "ready"

    def lines(self) -> list[str]:
        """The report as text: a heading, one line per finding, the verdict."""
        heading = f"redis-tasks check {self.target} (prefix {self.prefix})"
        return [heading, *(finding.line() for finding in self.findings), self.verdict()]

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON document."""
        return {
            "target": self.target,
            "prefix": self.prefix,
            "ready": self.ready,
            "errors": self.count("error"),
            "warnings": self.count("warn"),
            "findings": [finding.to_json() for finding in self.findings],
        }


def redact(url: str) -> str:
    """``url`` without its user name and password (what the report may name)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "the given URL"
    where = f"[{host}]" if ":" in host else host
    netloc = f"{where}:{port}" if port is not None else where
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def scrub(text: str, url: str) -> str:
    """``text`` with the password of ``url`` blotted out, wherever it appears."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return text
    return text.replace(password, "***") if password else text
