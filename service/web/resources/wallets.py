"""Wallets: ops pay in, pay out and correct, each with a reason; readers see balance and statement.

Stakes, returns and payouts never pass through here: they reach a wallet only in the same
append as the table events that cause them.
"""

from collections.abc import Callable
from typing import Any

import marshmallow as ma
from flask.views import MethodView

from domain.wallet import Corrected, Deposited, Withdrawn
from service.application.actor import Actor
from service.application.appends import Receipt
from service.application.keys import Role
from service.application.wallets import Balance, StatementEntry
from service.web.api import Blueprint, actor, container, read_models
from service.web.auth import READERS, roles
from service.web.consistency import exact_read
from service.web.fields import (
    DEFAULT_PAGE,
    MAX_PENCE,
    PLAYER_ID_PARAMETER,
    PageQuerySchema,
    pence_field,
    reason_field,
)
from service.web.operators import known_player

blp = Blueprint(
    "wallets", __name__, url_prefix="/wallets", description="Wallets: movements by ops, balances."
)


class MovementSchema(ma.Schema):
    """A deposit or withdrawal by ops: a positive amount and why."""

    amount_pence = pence_field("A positive number of pence.", required=True)
    reason = reason_field("Why the money moves, for the statement and the audit log.")


class DepositSchema(MovementSchema):
    """A deposit by ops: a positive amount, why, and the payment's reference if it has one."""

    reference = ma.fields.String(
        load_default=None,
        allow_none=True,
        validate=ma.validate.Length(min=1, max=128),
        metadata={
            "description": "The payment's reference at the cashier or payment provider, "
            "recorded with the deposit (1 to 128 characters)."
        },
    )


def _not_zero(amount: int) -> None:
    if amount == 0:
        raise ma.ValidationError("A correction changes the balance: it is not 0.")


class CorrectionSchema(ma.Schema):
    """A correction by ops: a signed, non-zero amount and why."""

    amount_pence = ma.fields.Integer(
        strict=True,
        required=True,
        validate=[ma.validate.Range(min=-MAX_PENCE, max=MAX_PENCE), _not_zero],
        metadata={"description": "Pence to add (negative: to take away); not 0."},
    )
    reason = reason_field("Why the balance is corrected.")


class BalanceSchema(ma.Schema):
    """A wallet's balances: what may be staked or withdrawn, and what is on a layout."""

    player_id = ma.fields.String(required=True)
    available_pence = ma.fields.Integer(required=True)
    reserved_pence = ma.fields.Integer(required=True)
    version = ma.fields.Integer(required=True, metadata={"description": "The wallet's version."})


class LastAnswerSchema(ma.Schema):
    """What a seamless operator's wallet last said of the player's balance."""

    balance_pence = ma.fields.Integer(required=True)
    call = ma.fields.String(required=True, metadata={"enum": ["balance", "bet", "win", "rollback"]})
    answered_at = ma.fields.DateTime(required=True)


class WalletSchema(BalanceSchema):
    """A wallet's balances; for a seamless operator's player, also the wallet's last answer."""

    seamless = ma.fields.Nested(
        LastAnswerSchema,
        allow_none=True,
        metadata={
            "description": "Only for a seamless operator's player, whose money is in the"
            " operator's wallet (docs/wallets.md): the balance its last answer stated (null"
            " before any). Shoebox's own balances are then 0."
        },
    )


class MovementResultSchema(BalanceSchema):
    """A movement recorded, and the balances after it."""

    type = ma.fields.String(
        required=True, metadata={"enum": [Deposited.type, Withdrawn.type, Corrected.type]}
    )
    amount_pence = ma.fields.Integer(required=True)
    reason = ma.fields.String(required=True)


class StatementQuerySchema(PageQuerySchema):
    """A page of the statement: the latest entries, or those before a version."""

    before = ma.fields.Integer(
        validate=ma.validate.Range(min=1),
        metadata={"description": "Only entries before this wallet version (for the next page)."},
    )


class StatementEntrySchema(ma.Schema):
    """One movement on a wallet, with the balances after it."""

    version = ma.fields.Integer(required=True)
    position = ma.fields.Integer(required=True, metadata={"description": "In the global log."})
    recorded_at = ma.fields.DateTime(required=True)
    type = ma.fields.String(required=True)
    amount_pence = ma.fields.Integer(
        required=True, metadata={"description": "The change to the available balance."}
    )
    reserved_change_pence = ma.fields.Integer(required=True)
    available_after_pence = ma.fields.Integer(required=True)
    reserved_after_pence = ma.fields.Integer(required=True)
    reason = ma.fields.String(allow_none=True, required=True)
    table_id = ma.fields.String(allow_none=True, required=True)
    round_id = ma.fields.String(allow_none=True, required=True)
    spot = ma.fields.String(allow_none=True, required=True)
    stake_pence = ma.fields.Integer(allow_none=True, required=True)
    payout_pence = ma.fields.Integer(allow_none=True, required=True)
    commission_pence = ma.fields.Integer(allow_none=True, required=True)


class StatementSchema(ma.Schema):
    """A page of a wallet's statement, newest first."""

    player_id = ma.fields.String(required=True)
    entries = ma.fields.List(ma.fields.Nested(StatementEntrySchema), required=True)
    next_before = ma.fields.Integer(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `before` for the next page; null on the last."},
    )


def _balance(balance: Balance) -> dict[str, Any]:
    return {
        "player_id": balance.player_id,
        "available_pence": balance.available,
        "reserved_pence": balance.reserved,
        "version": balance.version,
    }


def _entry(entry: StatementEntry) -> dict[str, Any]:
    return {
        "version": entry.version,
        "position": entry.position,
        "recorded_at": entry.recorded_at,
        "type": entry.type,
        "amount_pence": entry.amount,
        "reserved_change_pence": entry.reserved_change,
        "available_after_pence": entry.available_after,
        "reserved_after_pence": entry.reserved_after,
        "reason": entry.reason,
        "table_id": entry.table_id,
        "round_id": entry.round_id,
        "spot": entry.spot,
        "stake_pence": entry.stake,
        "payout_pence": entry.payout,
        "commission_pence": entry.commission,
    }


Move = Callable[[str, int, str, Actor], Receipt]


def _moved(player_id: str, movement: dict[str, Any], move: Move) -> dict[str, Any]:
    """Record a movement and answer with it and the wallet's balances just after it."""
    receipt = move(player_id, movement["amount_pence"], movement["reason"], actor())
    (event,) = receipt.events
    # The wallet at the movement's own version, not the wallet now: a bet may follow it.
    after = container().wallets.balances_after(receipt)[player_id]
    return {
        "player_id": player_id,
        "type": event.type,
        "amount_pence": movement["amount_pence"],
        "reason": movement["reason"],
        "available_pence": after.available,
        "reserved_pence": after.reserved,
        "version": after.version,
    }


@blp.route("/<id:player_id>", parameters=[PLAYER_ID_PARAMETER])
class Wallet(MethodView):
    """A player's wallet."""

    # Decides money: always from the primary, never a replica (docs/scaling.md).
    @exact_read
    @roles(*READERS)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, WalletSchema)
    def get(self, player_id: str) -> dict[str, Any]:
        """Read a wallet's balances (an unused wallet holds nothing), exact at once.

        Read from the wallet's own stream (its newest snapshot and the events after it), not
        from the read model: a bet, a settlement or a deposit answered a moment ago is in it.
        `version` is the wallet's version the figures are at. A seamless operator's player
        also has `seamless`: the balance the operator's wallet last stated, and when.
        """
        known_player(player_id)
        document = _balance(container().wallets.balance(player_id))
        seamless = container().seamless
        if seamless is not None and seamless.is_seamless(player_id):
            last = seamless.last_answer(player_id)
            document["seamless"] = (
                None
                if last is None
                else {
                    "balance_pence": last.balance,
                    "call": last.call,
                    "answered_at": last.answered_at,
                }
            )
        return document


@blp.route("/<id:player_id>/deposits", parameters=[PLAYER_ID_PARAMETER])
class Deposits(MethodView):
    """Money paid into a wallet."""

    @roles(Role.OPS)
    @blp.arguments(DepositSchema)
    @blp.response(201, MovementResultSchema)
    def post(self, movement: dict[str, Any], player_id: str) -> dict[str, Any]:
        """Pay money into a wallet, saying why and, if it has one, the payment's reference."""
        wallets, reference = container().wallets, movement["reference"]

        def deposit(player_id: str, amount: int, reason: str, actor: Actor) -> Receipt:
            return wallets.deposit(player_id, amount, reason, actor, reference)

        return _moved(player_id, movement, deposit)


@blp.route("/<id:player_id>/withdrawals", parameters=[PLAYER_ID_PARAMETER])
class Withdrawals(MethodView):
    """Money paid out of a wallet."""

    @roles(Role.OPS)
    @blp.arguments(MovementSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, MovementResultSchema)
    def post(self, movement: dict[str, Any], player_id: str) -> dict[str, Any]:
        """Pay money out of a wallet, never more than is available, saying why."""
        known_player(player_id)
        return _moved(player_id, movement, container().wallets.withdraw)


@blp.route("/<id:player_id>/corrections", parameters=[PLAYER_ID_PARAMETER])
class Corrections(MethodView):
    """Corrections of a wallet's balance."""

    @roles(Role.OPS)
    @blp.arguments(CorrectionSchema)
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(201, MovementResultSchema)
    def post(self, movement: dict[str, Any], player_id: str) -> dict[str, Any]:
        """Correct a wallet by a signed amount, saying why."""
        known_player(player_id)
        return _moved(player_id, movement, container().wallets.correct)


@blp.route("/<id:player_id>/statement", parameters=[PLAYER_ID_PARAMETER])
class Statement(MethodView):
    """A wallet's own statement."""

    @roles(*READERS)
    @blp.arguments(StatementQuerySchema, location="query")
    @blp.alt_response(404, response="NOT_FOUND")
    @blp.response(200, StatementSchema)
    def get(self, page: dict[str, Any], player_id: str) -> dict[str, Any]:
        """Read a wallet's movements, newest first, with the balances after each."""
        known_player(player_id)
        limit = page.get("limit", DEFAULT_PAGE)
        # The read model; the wallet's own stream only in the in-memory wiring, which has none.
        reader = read_models() or container().wallets
        entries = reader.statement(player_id, limit=limit, before=page.get("before"))
        oldest = entries[-1].version if entries else None
        return {
            "player_id": player_id,
            "entries": [_entry(entry) for entry in entries],
            "next_before": oldest
            if oldest is not None and oldest > 1 and len(entries) == limit
            else None,
        }
