"""The event types a Shoebox log may hold, as docs/verification.md and docs/audit-log.md list them.

This verifier keeps its own list rather than importing the server's: an event of a type not
named here is reported, so a log cannot smuggle in a kind of event no regulator has read about.
"""

from typing import Final

EVENT_TYPES: Final[frozenset[str]] = frozenset(
    {
        # Table streams: the table, its shoes, rounds, coups, bets, settlements and voids.
        "TableCreated",
        "TableSuspended",
        "TableReopened",
        "ShoeOpened",
        "ShoeRetired",
        "ShoeRevealed",
        "ClientSeedRotated",
        "PlayerSat",
        "PlayerLeft",
        "PlayerChangedSeat",
        "PlayerRemoved",
        "PlayerMuted",
        "PlayerUnmuted",
        "RoundOpened",
        "BetPlaced",
        "DealPressed",
        "DealResumed",
        "PlayerPassed",
        "PlayerExcluded",
        "CardDrawn",
        "HandStood",
        "CoupCompleted",
        "BetSettled",
        "RoundSettled",
        "RoundEndedWithoutPlay",
        "StakeReturned",
        "SettlementReversed",
        "RoundVoided",
        "MalfunctionDeclared",
        # Wallet streams.
        "Deposited",
        "Withdrawn",
        "Corrected",
        "StakeReserved",
        "PayoutCredited",
        # Seamless streams: a seamless operator's player, whose money is in the operator's
        # own wallet (docs/wallets.md): sessions, debits, and the calls owed and their fates.
        "SessionOpened",
        "StakeDebited",
        "WalletCallRefused",
        "WalletCallOwed",
        "WalletCallConfirmed",
        "WalletCallParked",
        # A seamless operator's daily reconciliation with its wallet: informational to the
        # verifier, which has no access to the wallet's own list.
        "WalletReconciled",
        # Chat, player limits, API keys and the audit log's own checkpoints.
        "MessagePosted",
        "PlayerLimitSet",
        "ApiKeyCreated",
        "ApiKeyRevoked",
        "CheckpointSigned",
        "TreeCheckpointSigned",
        "LogRestored",
    }
)
