"""Showing each tree checkpoint to the witnesses (c2sp.org/tlog-witness), over HTTP.

A witness that does not answer in time, or refuses, is left out of this note: the log never
stops for a witness. The failure is counted in /metrics (`shoebox_witness_failures_total`)
and logged as an error, and the witness is asked again with the next checkpoint, from the
size it says it last cosigned (its 409 answer), so it catches up by itself.
"""

from __future__ import annotations

import base64
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from service.application.checkpoints import Cosignatures
from service.runtime.metrics import WITNESS_COSIGNED_SIZE, WITNESS_FAILURES

log = logging.getLogger(__name__)

TIMEOUT_SECONDS: Final = 2.0
"""Per request: a slow witness costs the checkpoint job at most this, twice."""
_MAX_ANSWER = 64 * 1024


@dataclass(frozen=True, slots=True)
class Witness:
    """A configured witness: its add-checkpoint prefix and its vkey's name and key id."""

    url: str
    name: str
    key_id: bytes

    @classmethod
    def parse(cls, url: str, vkey: str) -> Witness:
        """A witness from its URL and vkey (`<name>+<hex id>+<base64 key>`)."""
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise ValueError(f"not a verifier key: {vkey!r}")
        return cls(url.rstrip("/"), parts[0], bytes.fromhex(parts[1]))


class HttpWitnesses:
    """The configured witnesses, asked one after the other with bounded waits."""

    def __init__(self, witnesses: Sequence[Witness], timeout: float = TIMEOUT_SECONDS) -> None:
        self._witnesses = tuple(witnesses)
        self._timeout = timeout

    def cosign(
        self,
        note: str,
        size: int,
        last_sizes: dict[str, int],
        proof: Callable[[int], list[bytes]],
    ) -> Cosignatures:
        """The cosignature lines of every witness that gave one."""
        lines: list[str] = []
        names: list[str] = []
        for witness in self._witnesses:
            line = self._ask(witness, note, size, min(last_sizes.get(witness.name, 0), size), proof)
            if line is not None:
                lines.append(line)
                names.append(witness.name)
                WITNESS_COSIGNED_SIZE.labels(witness.name).set(size)
        return Cosignatures(tuple(lines), tuple(names))

    def _ask(
        self,
        witness: Witness,
        note: str,
        size: int,
        old: int,
        proof: Callable[[int], list[bytes]],
    ) -> str | None:
        # At most twice: the log's idea of the witness's size may be stale (409 says the
        # witness's own), and one more request from that size settles it.
        for _ in range(2):
            status, body = self._post(witness, _request_body(note, old, proof(old) if old else []))
            if status == 200:
                return _own_line(witness, body)
            if status == 409:
                try:
                    told = int(body.strip())
                except ValueError:
                    break
                if not 0 <= told <= size:
                    # The witness has cosigned a larger tree than this log has: a fork, or a
                    # restored log. Never argued with; reported.
                    self._fail(witness, "ahead", f"the witness has cosigned size {told} > {size}")
                    return None
                old = told
                continue
            self._fail(witness, str(status) if status else "unreachable", body.strip()[:200])
            return None
        self._fail(witness, "conflict", "the witness's size kept moving")
        return None

    def _post(self, witness: Witness, body: bytes) -> tuple[int, str]:
        # The URL's scheme is http or https: Settings accepts no other for a witness.
        request = urllib.request.Request(  # noqa: S310
            f"{witness.url}/add-checkpoint",
            data=body,
            method="POST",
            headers={"Content-Type": "text/plain; charset=utf-8"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:  # noqa: S310 - configured URL
                return answer.status, answer.read(_MAX_ANSWER).decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read(_MAX_ANSWER).decode("utf-8", "replace")
        except (OSError, ValueError) as error:
            return 0, str(error)

    @staticmethod
    def _fail(witness: Witness, reason: str, detail: str) -> None:
        WITNESS_FAILURES.labels(witness.name, reason).inc()
        log.error("witness %s did not cosign (%s): %s", witness.name, reason, detail)


def _request_body(note: str, old: int, proof: list[bytes]) -> bytes:
    head = [f"old {old}", *(base64.b64encode(element).decode() for element in proof)]
    return ("\n".join(head) + "\n\n" + note).encode()


def _own_line(witness: Witness, body: str) -> str | None:
    # Only the line of the key configured for this witness is kept; others are not ours to
    # publish. Its signature is checked by every verifier; here only its key id is matched.
    for line in body.splitlines():
        fields = line.split(" ")
        if len(fields) == 3 and fields[0] == "\u2014" and fields[1] == witness.name:
            try:
                blob = base64.b64decode(fields[2], validate=True)
            except ValueError:
                continue
            if blob[:4] == witness.key_id:
                return line + "\n"
    WITNESS_FAILURES.labels(witness.name, "no-cosignature").inc()
    log.error("witness %s answered 200 without a cosignature of its key", witness.name)
    return None
