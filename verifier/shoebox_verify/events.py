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
        # Chat, player limits, API keys and the audit log's own checkpoints.
        "MessagePosted",
        "PlayerLimitSet",
        "ApiKeyCreated",
        "ApiKeyRevoked",
        "CheckpointSigned",
        "TreeCheckpointSigned",
    }
)
