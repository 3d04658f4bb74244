"""Every event type the log can hold, named once.

Each name is its event class's `type`; code elsewhere refers to `CardDrawn.type`, never to
the string. `EVENT_TYPE_NAMES` is the whole set, so that an independent verifier's list of
types can be compared against it.
"""

from typing import Any, Final

from domain.api_keys import API_KEY_EVENT_TYPES
from domain.audit import CheckpointSigned, LogRestored, TreeCheckpointSigned
from domain.chat import CHAT_EVENT_TYPES
from domain.player_limits import PLAYER_LIMIT_EVENT_TYPES
from domain.reconciliation import RECONCILIATION_EVENT_TYPES
from domain.seamless import SEAMLESS_EVENT_TYPES
from domain.table import TABLE_EVENT_TYPES
from domain.wallet import WALLET_EVENT_TYPES

EVENT_CLASSES: Final[tuple[type[Any], ...]] = (
    *TABLE_EVENT_TYPES,
    *WALLET_EVENT_TYPES,
    *CHAT_EVENT_TYPES,
    *PLAYER_LIMIT_EVENT_TYPES,
    *SEAMLESS_EVENT_TYPES,
    *API_KEY_EVENT_TYPES,
    *RECONCILIATION_EVENT_TYPES,
    CheckpointSigned,
    TreeCheckpointSigned,
    LogRestored,
)
"""Every event class. `StakeReturned` and `SettlementReversed` appear twice: the table's
(domain/round.py) and the wallet's (domain/wallet.py) share a name, on different streams."""

EVENT_TYPE_NAMES: Final[frozenset[str]] = frozenset(cls.type for cls in EVENT_CLASSES)
"""The name of every event type the log can hold."""
