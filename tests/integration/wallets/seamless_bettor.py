"""A Shoebox process that places one seamless bet, for a test to kill mid-call.

Run as `python -m tests.integration.wallets.seamless_bettor` with BETTOR_DATABASE_URL (the
application role's), BETTOR_WALLET_URL, BETTOR_SECRET (key k1), BETTOR_TABLE and
BETTOR_PLAYER in the environment. It prints `betting` just before the bet.

With BETTOR_ACTION=deal it presses Deal for the player instead (settling the round), prints
`dealt`, and kills itself at once with SIGKILL: a process dead just after its append commits,
before anything else (a projection, a delivery) could run.

With BETTOR_ACTION=deliver it is the worker instead: it prints `delivering` and runs the
owed calls' delivery once (deliver_due), for a test to kill while a call is at the wallet.
"""

from __future__ import annotations

import os
import signal

from domain.outcome import Spot
from events.postgres import PostgresEventStore, open_pool
from events.store import utc_now
from service.application.actor import Actor
from service.application.game.tables import GameService
from service.application.operators import operator_of
from service.application.seamless import SeamlessWalletConfig, Secret
from service.application.seamless_bets import SeamlessService
from service.application.seamless_calls import SeamlessCalls
from service.application.seamless_owed import OwedCalls
from service.application.upcasters import upcasters
from service.runtime.seamless_wallet import SeamlessWalletClient


def main() -> None:
    config = SeamlessWalletConfig(
        operator="acme",
        base_url=os.environ["BETTOR_WALLET_URL"],
        key_id="k1",
        secret=Secret(os.environ["BETTOR_SECRET"]),
        currency="GBP",
        read_timeout_seconds=30.0,
    )
    with open_pool(os.environ["BETTOR_DATABASE_URL"], max_size=4) as pool:
        store = PostgresEventStore(pool, utc_now, upcasters())

        def seamless_player(player: str) -> bool:
            return operator_of(player) == "acme"

        owed = OwedCalls(pool, utc_now, seamless_player)
        games = GameService(store, utc_now, seamless=seamless_player, owed=owed)
        client = SeamlessWalletClient(config, utc_now)
        seamless = SeamlessService(
            store, utc_now, pool, games, {"acme": (config, client)}, owed=owed
        )
        if os.environ.get("BETTOR_ACTION") == "deliver":
            print("delivering", flush=True)
            print(SeamlessCalls(pool, utc_now, seamless).deliver_due().summary(), flush=True)
            return
        if os.environ.get("BETTOR_ACTION") == "deal":
            games.press_deal(
                os.environ["BETTOR_TABLE"], os.environ["BETTOR_PLAYER"], Actor("bettor", "frontend")
            )
            print("dealt", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        print("betting", flush=True)
        seamless.place_bet(
            os.environ["BETTOR_TABLE"],
            os.environ["BETTOR_PLAYER"],
            Spot.BANKER,
            700,
            Actor("bettor", "frontend"),
        )
        print("placed", flush=True)


if __name__ == "__main__":
    main()
