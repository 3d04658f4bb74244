"""The README's dashboard screenshot, taken from a real `make run`: a few coups played through the
API, then /dashboard signed in with the ops demo key, in Debian's chromium.

Not a test: the browser tests run the API and the projector without a worker, so a picture
taken there shows a queue nobody consumes (the old one said "Queue depth 215", with work that
other tests had left on a shared Redis). With `make run` (or `.venv/bin/shoebox run`) going:

    .venv/bin/python -m tests.browser.make_run_screenshot --base http://127.0.0.1:8000 \\
        --keys .shoebox/demo-keys.json --out docs/screenshots/dashboard.png

Look at the picture before committing it.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

TABLES = (("baccarat-1", 6), ("baccarat-2", 3))
PLAYERS = ("ada", "brook", "cyd")
SPOTS = ("banker", "player", "tie")


def call(base: str, key: str, method: str, path: str, body: object = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise SystemExit(f"{method} {path}: {error.code} {error.read()!r}") from error


def play(base: str, keys: dict[str, str]) -> None:
    """Tables, players and a few coups each, as a casino's backend would send them."""
    ops, frontend = keys["ops"], keys["frontend"]
    for player in PLAYERS:
        call(
            base,
            ops,
            "POST",
            f"/v1/wallets/{player}/deposits",
            {"amount_pence": 50_000, "reason": "demo"},
        )
    for table, coups in TABLES:
        call(base, ops, "POST", "/v1/tables", {"table_id": table, "betting_window_ms": 20_000})
        for seat, player in enumerate(PLAYERS, start=1):
            call(
                base,
                frontend,
                "POST",
                f"/v1/tables/{table}/seats",
                {"player_id": player, "seat": seat},
            )
        for coup in range(coups):
            for number, player in enumerate(PLAYERS):
                bet = {
                    "player_id": player,
                    "spot": SPOTS[(coup + number) % 2],
                    "stake_pence": 500 * (number + 1),
                }
                call(base, frontend, "POST", f"/v1/tables/{table}/bets", bet)
            for player in PLAYERS:
                call(base, frontend, "POST", f"/v1/tables/{table}/deal", {"player_id": player})
        # The next round under way: its window counting down on the dashboard.
        bet = {"player_id": PLAYERS[0], "spot": "banker", "stake_pence": 1_000}
        call(base, frontend, "POST", f"/v1/tables/{table}/bets", bet)


def screenshot(base: str, keys: dict[str, str], out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.goto(f"{base}/dashboard")
            page.fill("#key", keys["ops"])
            page.click("#sign-in")
            page.wait_for_selector("#dashboard[data-ready=true]")
            page.wait_for_function(
                "() => document.querySelector('#feed-status').textContent === 'live'"
            )
            time.sleep(2)  # the read models' moment behind the log, and a countdown tick
            page.screenshot(path=str(out))
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--keys", type=Path, default=Path(".shoebox/demo-keys.json"))
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots/dashboard.png"))
    parser.add_argument("--no-play", action="store_true", help="Only take the screenshot.")
    options = parser.parse_args()
    keys = {key["role"]: key["secret"] for key in json.loads(options.keys.read_text())}
    if not options.no_play:
        play(options.base, keys)
    screenshot(options.base, keys, options.out)
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
