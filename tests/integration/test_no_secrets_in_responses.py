"""No response, to any role, ever shows a live shoe's server seed or its next undealt cards.

A whole one-deck shoe is played over the real PostgreSQL store, and after every action every
GET endpoint the app serves is called; every body (commands' answers included) is searched
for the live shoe's seed, read from the store as only a test may, and for its next four
undealt cards as a JSON list would hold them. Once the shoe retires, its seed is revealed.
"""

import json
import re
from dataclasses import replace
from typing import Any

import pytest
from werkzeug.test import TestResponse

from domain.cards import card_code
from domain.shoe import commitment, shuffle_shoe
from events.merkle_store import PostgresTree
from events.postgres import Pool, PostgresEventStore
from service.application.actor import Actor
from service.application.checkpoints import CheckpointService, SigningKey, TreeSigning
from service.application.keys import Role
from service.application.read_models.queries import ProjectionService
from service.runtime.container import Container
from service.web.api import EXTENSION
from service.web.auth import endpoint_roles
from tests.api_harness import Api

PLAYERS = ("alice", "bob")


class Watch:
    """Checks each response against the shoe that is live once the response is given."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.checked = 0
        self.revealed: list[str] = []

    def live_secrets(self) -> tuple[str, list[str]] | None:
        wiring = self.api.app.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        shoe = wiring.games.table("T1").live_shoe
        if shoe is None:
            return None
        seed = self.api.store.load_shoe_secret(shoe.shoe_id)
        assert seed is not None
        assert commitment(seed) == shoe.commitment
        cards = shuffle_shoe(seed, shoe.client_seed, shoe.nonce, shoe.decks).cards
        undealt = [card_code(card) for card in cards[shoe.next_position :]]
        return seed, undealt

    def __call__(self, response: TestResponse) -> None:
        body = response.get_data(as_text=True)
        if '"shoe_revealed":{' in body.replace(" ", ""):
            self.revealed.append(json.loads(body)["shoe_revealed"]["server_seed"])
        secrets = self.live_secrets()
        if secrets is None:
            return
        seed, undealt = secrets
        assert seed not in body, response.request.path
        assert seed.upper() not in body.upper()
        next_four = undealt[:4]
        if len(next_four) == 4:
            assert not holds_in_order(body, next_four), response.request.path
        self.checked += 1


def holds_in_order(body: str, codes: list[str]) -> bool:
    """Whether the codes appear as consecutive JSON strings in a list, whatever the spacing."""
    pattern = r"\s*,\s*".join(re.escape(json.dumps(code)) for code in codes)
    return re.search(pattern, body) is not None


SIGNER = Actor("checkpointer", "system")

# The GETs whose query parameters are required, with the query they are read with.
_QUERIES = {
    "/v1/log/proof/inclusion": "?index=0&size={size}",
    "/v1/log/proof/consistency": "?from=1&to={size}",
    "/v1/rounds/<round_id>/proof": "?size={size}",
}


# A front end gets a round's proof only once its shoe is revealed (403 before); a regulator
# gets it at once, and it must not leak what is still secret to them either.
_REGULATORS_ONLY_UNTIL_REVEALED = {"/v1/rounds/<round_id>/proof"}


def read_everything(api: Api, signer: CheckpointService) -> None:
    """Call every GET endpoint the app serves, for the table, each player, round and shoe."""
    assert api.projections is not None
    api.projections.catch_up()  # the read models lag the log by a moment; not for this check
    # A tree checkpoint of the log as it is now, so that its proofs have a size to be read at.
    signer.sign_head(SIGNER)
    noted = signer.latest_tree()
    assert noted is not None
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    table = wiring.games.table("T1")
    names = {
        "<table_id>": "T1",
        "<round_id>": table.round.round_id if table.round is not None else "T1-1",
        "<shoe_id>": table.live_shoe.shoe_id if table.live_shoe is not None else "none",
    }
    roles = list(Role)
    for number, rule in enumerate(api.app.url_map.iter_rules()):
        if "GET" not in (rule.methods or set()) or not rule.rule.startswith("/v1/"):
            continue
        if rule.rule.endswith("openapi.json"):
            continue  # the document is made from the code alone, and is large
        if rule.rule.endswith("/feed"):
            continue  # never ends; tests/e2e/test_feed.py searches a whole feed for secrets
        # `<id:table_id>` and `<table_id>` alike, whatever the converter.
        template = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"<\1>", rule.rule)
        if ("<round_id>" in template and table.round is None) or (
            "<shoe_id>" in template and table.live_shoe is None
        ):
            continue  # nothing to read yet, so nothing that could leak
        query = _QUERIES.get(template, "").format(size=noted.size)
        for player in PLAYERS if "<player_id>" in template else PLAYERS[:1]:
            path = template.replace("<player_id>", player) + query
            for placeholder, value in names.items():
                path = path.replace(placeholder, value)
            allowed = sorted(endpoint_roles(api.app, rule.endpoint, "GET") or ())
            role = allowed[number % len(allowed)] if allowed else roles[0]
            if template in _REGULATORS_ONLY_UNTIL_REVEALED:
                role = Role.REGULATOR
            response = api.call("GET", path, role=role)
            assert response.status_code == 200, (path, response.get_json(force=True))


@pytest.mark.slow
def test_a_whole_shoe_never_shows_its_seed_or_next_cards_until_it_is_revealed(
    app_pool: Pool,
) -> None:
    api = Api(
        store=PostgresEventStore(app_pool),
        projections=lambda clock: ProjectionService(app_pool, clock),
    )
    watch = Watch(api)
    api.on_response = watch
    tree = PostgresTree(app_pool)
    wiring = api.app.extensions[EXTENSION]
    assert isinstance(wiring, Container)
    api.app.extensions[EXTENSION] = replace(wiring, tree=tree)
    signer = CheckpointService(
        api.store,
        api.clock,
        SigningKey.from_seed(bytes(32)),
        tree=TreeSigning(tree, "t.example/log"),
    )
    api.create_table("T1", seats=2, decks=1)
    for seat, player in enumerate(PLAYERS, start=1):
        api.fund(player, 1_000_000)
        api.sit("T1", player, seat)
    api.ok("POST", "/v1/tables/T1/chat", {"player_id": "alice", "text": "good luck"}, status=201)
    read_everything(api, signer)
    holds = holds_in_order('[{"a":1},"4D", "KS","2H" ,"TC"]', ["4D", "KS", "2H", "TC"])
    assert holds, "the card search must find a planted sequence"

    rounds = 0
    timed_out = False
    while not watch.revealed:
        rounds += 1
        assert rounds < 30, "a one-deck shoe retires within 30 coups"
        for spot, player in zip(("banker", "player"), PLAYERS, strict=True):
            api.bet("T1", player, spot, 1_000)
            read_everything(api, signer)
        if rounds == 1:
            first_commitment = api.state()["shoe"]["server_seed_hash"]
        last: dict[str, Any] = api.act("T1", "deal", "alice")
        read_everything(api, signer)
        if not timed_out:
            # Once in the shoe, Bob never acts: the window closes on the next write.
            timed_out = True
            api.clock.advance(16)
            api.ok("POST", "/v1/tables/T1/chat", {"player_id": "bob", "text": "..."}, status=201)
            state = api.state()
            assert state["round_id"] != last["round_id"]
        else:
            last = api.act("T1", "deal", "bob")
            assert last["coup"] is not None
        read_everything(api, signer)

    (seed,) = watch.revealed
    assert commitment(seed) == first_commitment
    assert watch.checked > 100
