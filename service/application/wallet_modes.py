"""Whether each operator's wallet mode (internal or seamless) fits the money it holds (issue 24).

An operator's wallet mode is the wallets file's (SHOEBOX_SEAMLESS_WALLETS_FILE), read at
startup; nothing records the mode it had before. So the rule "the mode cannot change while any
of its players holds a balance or an open bet" is checked as what it protects: the money must
be where the configured mode looks for it.

- An operator configured **seamless** must have no internal player with a non-zero balance
  (available or reserved; a reserved stake is an open bet): Shoebox would no longer move that
  wallet, so its money would be stranded and its open bets settled into nothing.
- An operator configured **internal** (every operator the file does not name) must have no
  seamless player with an open debit or a win or rollback still owed: nothing would send
  them, so the operator's wallet would keep a stake or miss a payout.

Candidates are read from the read models (`proj_wallets`, `seamless_calls`), never by a scan of
the log; each internal candidate is then confirmed from its wallet stream, so a projection
that is a moment behind cannot refuse a drained wallet. A wallet the projector has not reached
at all when the check runs (one deposited in the last moments before the switch) is not seen.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from events.postgres import Pool
from service.application.operators import DEFAULT_OPERATOR, SEPARATOR, player_ref
from service.application.wallets import WalletService

LISTED: Final = 20
"""At most this many conflicts are named; the count says how many more there are."""

# The internal wallets of some operators: every wallet a projection has seen, whose operator is
# the key's part before the separator (none: the default operator).
_INTERNAL_WALLETS: Final = """
SELECT player_id FROM proj_wallets
WHERE (strpos(player_id, %(sep)s) > 0 AND split_part(player_id, %(sep)s, 1) = ANY(%(ops)s))
   OR (strpos(player_id, %(sep)s) = 0 AND %(default)s = ANY(%(ops)s))
ORDER BY player_id
"""

# Seamless money not yet closed, of the operators that are not seamless now: a debit the wallet
# took (or may have) whose win or rollback is not yet queued, and every call still owed.
_OPEN_SEAMLESS: Final = """
SELECT operator, player_id, count(*) FROM seamless_calls
WHERE NOT (operator = ANY(%(ops)s))
  AND ((kind IN ('win', 'rollback') AND state IN ('owed', 'parked'))
       OR (kind = 'bet' AND (state = 'in_flight' OR (state = 'confirmed' AND closed_by IS NULL))))
GROUP BY operator, player_id
ORDER BY operator, player_id
"""


@dataclass(frozen=True, slots=True)
class ModeConflict:
    """One player whose money the configured wallet mode would strand."""

    operator: str
    configured: str
    player_id: str
    holds: str

    def describe(self) -> str:
        """One line for an operator: who, and what they hold."""
        return (
            f"operator {self.operator!r} is configured {self.configured}, but its player"
            f" {self.player_id!r} {self.holds}"
        )


def mode_conflicts(
    pool: Pool, wallets: WalletService, seamless_operators: Collection[str]
) -> list[ModeConflict]:
    """Every player whose money does not fit its operator's configured wallet mode."""
    seamless = sorted(seamless_operators)
    conflicts: list[ModeConflict] = []
    with pool.connection() as conn:
        internal = [
            str(row[0])
            for row in conn.execute(
                _INTERNAL_WALLETS, {"sep": SEPARATOR, "ops": seamless, "default": DEFAULT_OPERATOR}
            ).fetchall()
        ]
        open_calls = conn.execute(_OPEN_SEAMLESS, {"ops": seamless}).fetchall()
    for key in internal:
        balance = wallets.balance(key)
        if balance.available == 0 and balance.reserved == 0:
            continue
        ref = player_ref(key)
        conflicts.append(
            ModeConflict(
                ref.operator,
                "seamless",
                ref.player_id,
                f"holds {balance.available} pence available and {balance.reserved} pence"
                " reserved (open bets) in Shoebox's own wallet",
            )
        )
    for operator, key, count in open_calls:
        conflicts.append(
            ModeConflict(
                str(operator),
                "internal",
                player_ref(str(key)).player_id,
                f"has {count} seamless call(s) still open (a debit not yet settled or rolled"
                " back, or a win or rollback still owed)",
            )
        )
    return conflicts


def conflicts_message(conflicts: list[ModeConflict]) -> str:
    """Why a process refuses to start, and what to do about it."""
    lines = [c.describe() for c in conflicts[:LISTED]]
    if len(conflicts) > LISTED:
        lines.append(f"... and {len(conflicts) - LISTED} more")
    return (
        "an operator's wallet mode cannot change while its players hold money or open bets"
        " in the other mode (docs/wallets.md, 'Changing an operator's wallet mode'):\n  "
        + "\n  ".join(lines)
        + "\nPut the wallets file (SHOEBOX_SEAMLESS_WALLETS_FILE) back as it was, settle or"
        " withdraw that money and let the owed calls drain, then change it."
    )
