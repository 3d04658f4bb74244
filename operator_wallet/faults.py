"""Faults the reference wallet can be told to make, so that a client's handling can be tested.

Each rule matches one call (or every call) and fires a number of times, in the order the
rules were added:

- `delay`: wait `delay_ms`, then carry out the call and answer it (a slow wallet, or, past the
  client's timeout, one that applies a call its client has given up on);
- `timeout`: wait `delay_ms` and close the connection; nothing is applied;
- `error_5xx`: answer `status` (503 unless told) without carrying out the call;
- `duplicate`: the call arrives twice: it is carried out, then carried out again, and the
  second, replayed answer is the one sent (with the header `Wallet-Replayed: true`);
- `lose_answer`: carry out the call, then close the connection without answering.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any, Final

ACTIONS: Final = ("delay", "timeout", "error_5xx", "duplicate", "lose_answer")
MATCHES: Final = ("*", "balance", "bet", "win", "rollback", "transactions")


class FaultError(ValueError):
    """A fault rule that cannot be followed."""


@dataclass(slots=True)
class FaultRule:
    """Make `action` on the next `times` calls of `call`."""

    action: str
    call: str = "*"
    times: int = 1
    delay_ms: int = 0
    status: int = 503

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise FaultError(f"action must be one of {', '.join(ACTIONS)}")
        if self.call not in MATCHES:
            raise FaultError(f"call must be one of {', '.join(MATCHES)}")
        if type(self.times) is not int or not 1 <= self.times <= 1_000_000:
            raise FaultError("times must be an integer from 1 to 1000000")
        if type(self.delay_ms) is not int or not 0 <= self.delay_ms <= 600_000:
            raise FaultError("delay_ms must be an integer from 0 to 600000")
        if type(self.status) is not int or not 500 <= self.status <= 599:
            raise FaultError("status must be a 5xx code")

    @classmethod
    def from_document(cls, document: Any) -> FaultRule:
        """The rule a JSON object describes, or FaultError."""
        if not isinstance(document, dict) or not set(document) <= set(cls.__slots__):
            raise FaultError(f"a fault rule is an object of {', '.join(cls.__slots__)}")
        try:
            return cls(**document)
        except TypeError as error:
            raise FaultError(str(error)) from None


class Faults:
    """The rules still to fire; shared by every request thread of one server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self.fired: list[tuple[str, str]] = []
        """(action, call) of every fault made, in order, for tests to check."""
        self.stopping = threading.Event()
        """Set when the server stops, to cut short any wait a fault is making."""

    def add(self, rule: FaultRule) -> None:
        """Queue `rule` behind the rules already waiting."""
        with self._lock:
            self._rules.append(rule)

    def clear(self) -> None:
        """Forget every rule still waiting."""
        with self._lock:
            self._rules.clear()

    def pending(self) -> list[dict[str, Any]]:
        """The rules still waiting, as documents."""
        with self._lock:
            return [asdict(rule) for rule in self._rules]

    def take(self, call: str) -> FaultRule | None:
        """The rule that fires on this call, if any, counted as fired."""
        with self._lock:
            for index, rule in enumerate(self._rules):
                if rule.call in ("*", call):
                    rule.times -= 1
                    if rule.times == 0:
                        del self._rules[index]
                    self.fired.append((rule.action, call))
                    return rule
        return None

    def wait(self, milliseconds: int) -> None:
        """Sleep, unless the server stops first."""
        self.stopping.wait(milliseconds / 1000)
