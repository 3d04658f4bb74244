"""The three results of a coup, which are also the three betting spots."""

from enum import StrEnum


class Outcome(StrEnum):
    """Which hand won a coup."""

    PLAYER = "player"
    BANKER = "banker"
    TIE = "tie"


class Spot(StrEnum):
    """Where a bet is placed on the layout."""

    PLAYER = "player"
    BANKER = "banker"
    TIE = "tie"
