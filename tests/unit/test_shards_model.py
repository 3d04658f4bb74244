"""The shard sizing model (bench/shards_model.py) on hand-worked cases, and the doc's figures.

docs/scaling.md ("Beyond one primary") quotes the model's table for the costs measured on this
machine (bench/shard_costs.json); the last test recomputes it, so neither the model nor the
doc can change without the other.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.shards import costs_of, simulate
from bench.shards_model import (
    Costs,
    Load,
    Saga,
    check,
    cross_shard_share,
    erlang_c,
    fifo_waits,
    sequencer_cycle,
    shard_arrivals,
    shard_cpu_ms,
    size,
    wait_quantile,
)

ROOT = Path(__file__).resolve().parents[2]


def costs(**changes: float) -> Costs:
    """Round costs for hand-working: 1 ms of CPU an append, nothing else unless changed."""
    base: dict[str, float] = {
        "append_backend_cpu_ms": 1.0,
        "append_p50_ms": 4.0,
        "append_p99_ms": 12.0,
        "sequencer_batch_cpu_ms": 0.0,
        "sequencer_append_cpu_ms": 0.0,
        "sequencer_batch_wall_ms": 0.0,
        "sequencer_append_wall_ms": 0.0,
        "web_cpu_per_bet_ms": 5.0,
    }
    base.update(changes)
    return Costs(**base)


def test_erlang_c_with_one_server_is_the_utilisation() -> None:
    # M/M/1: an arrival waits exactly when the server is busy, a fraction rho of the time.
    for rho in (0.1, 0.5, 0.9):
        assert erlang_c(1, rho) == pytest.approx(rho)


def test_erlang_c_on_worked_cases() -> None:
    # Two servers, one Erlang: B(2, 1) = (1/2) / (1 + 1 + 1/2) = 1/5, C = B / (1 - rho + rho
    # B) = (1/5) / (1/2 + 1/10) = 1/3.
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    # Three servers, two Erlangs: B = (4/3) / (19/3) = 4/19, C = (4/19) / (1/3 + 8/57) = 4/9.
    assert erlang_c(3, 2.0) == pytest.approx(4 / 9)
    # The textbook table's value for 10 agents at 8 Erlangs: 0.4092.
    assert erlang_c(10, 8.0) == pytest.approx(0.4092, abs=5e-5)


def test_an_unstable_queue_always_waits_forever() -> None:
    assert erlang_c(4, 4.0) == 1.0
    assert math.isinf(wait_quantile(4, 5.0, 1.0, 0.99))


def test_wait_quantile_of_mm1() -> None:
    # M/M/1, rate 0.5/s, service 1 s: P(W > t) = 0.5 exp(-0.5 t), so the p99 is 2 ln 50.
    assert wait_quantile(1, 0.5, 1.0, 0.99) == pytest.approx(2 * math.log(50))
    # When fewer than 1% of arrivals wait at all, the p99 wait is none.
    assert erlang_c(8, 1.0) < 0.01
    assert wait_quantile(8, 1.0, 1.0, 0.99) == 0.0


def test_a_table_plays_as_the_load_test_does() -> None:
    load = Load()
    # Four players, two bets each (one to three) and a Deal each, and the close, every 3 s.
    assert load.bets_per_second == pytest.approx(8 / 3)
    assert load.appends_per_second == pytest.approx(13 / 3)
    # 70% of the turns in the last 1.5 s of 3: 1.4 times the mean rate there.
    assert load.peak_factor == pytest.approx(1.4)


def test_the_saga_counts_its_appends() -> None:
    saga = Saga(failure_share=0.02)
    # Reserve + bet, 2% released, one settlement a player and round shared by two bets.
    assert saga.appends_per_bet(2.0) == pytest.approx(2.52)
    assert Saga.round_trips_on_path() == 2
    assert cross_shard_share(1) == 0.0
    assert cross_shard_share(4) == pytest.approx(0.75)


def test_the_sequencer_cycle_and_its_ceiling() -> None:
    c = costs(sequencer_batch_wall_ms=3.0, sequencer_append_wall_ms=0.1)
    # T = (3 + 1 ms poll) / (1 - 0.1 ms x 5,000/s) = 4 ms / 0.5.
    assert sequencer_cycle(5_000, c, 1.0) == pytest.approx(0.008)
    # At 10,000 appends a second a batch takes longer than the appends it places: behind.
    assert math.isinf(sequencer_cycle(10_000, c, 1.0))


def test_a_shards_cpu_counts_appends_and_the_sequencers_batches() -> None:
    c = costs(
        sequencer_batch_cpu_ms=0.5,
        sequencer_append_cpu_ms=0.05,
        sequencer_batch_wall_ms=3.0,
        sequencer_append_wall_ms=0.1,
    )
    # 1,000 appends/s: T = 4 / 0.9 ms, 225 batches/s x 0.5 ms + 1,000 x (1 + 0.05) ms.
    assert shard_cpu_ms(1_000, c, 1.0) == pytest.approx(225 * 0.5 + 1_050)


def test_sizing_seamless_tables_by_cores() -> None:
    # A table at the peak: 13/3 x 1.4 appends/s; 8 cores at 60% take 4,800 appends/s of 1 ms,
    # so 791.2 tables a shard: 1,000 tables need 2, 20,000 need 26.
    assert size(1_000, 8, costs(), Load(), internal_wallets=False).shards == 2
    figures = size(20_000, 8, costs(), Load(), internal_wallets=False)
    assert figures.shards == 26
    assert figures.cross_share == 0.0
    assert figures.extra_appends_per_bet == 0.0
    assert figures.limit == "cores"
    assert figures.cpu_utilisation == pytest.approx(20_000 / 26 * 13 / 3 * 1.4 / 8_000)


def test_sizing_internal_wallets_pays_for_the_saga() -> None:
    # Per table at the peak: 1.4 x (13/3 + 8/3 x 1.52 x (1 - 1/N)). At N = 48 a shard takes
    # 4,843 appends/s (over 4,800); at N = 49, 4,745.
    figures = size(20_000, 8, costs(), Load(), internal_wallets=True)
    assert figures.shards == 49
    assert figures.extra_appends_per_bet == pytest.approx(1.52 * 48 / 49)
    assert figures.appends_per_second == pytest.approx(4_745.1, abs=0.1)


def test_the_sequencer_sets_the_size_when_it_is_the_slower() -> None:
    # 0.1 ms of batch a append: half busy at 5,000 appends/s, before 16 cores' 9,600.
    c = costs(sequencer_append_wall_ms=0.1)
    figures = size(20_000, 16, c, Load(), internal_wallets=False)
    assert figures.limit == "sequencer"
    assert figures.sequencer_busy <= 0.5
    assert figures.shards == math.ceil(20_000 / (5_000 / (13 / 3 * 1.4)))


def test_the_global_root_is_one_append_a_checkpoint() -> None:
    figures = size(20_000, 8, costs(), Load(), internal_wallets=False, checkpoint_seconds=60)
    assert figures.root_appends_per_second == pytest.approx(1 / 60)
    assert figures.proof_hashes == math.ceil(math.log2(figures.shards))


def test_the_docs_figures_are_the_models() -> None:
    measured = json.loads((ROOT / "bench" / "shard_costs.json").read_text())
    doc = (ROOT / "docs" / "scaling.md").read_text()
    for cores in (8, 16):
        table = simulate(costs_of(measured), cores, Load(), Saga())
        for line in table.splitlines():
            if line.startswith("| "):
                assert line in doc, f"docs/scaling.md lacks the model's line: {line}"


def test_fifo_waits_on_worked_cases() -> None:
    # One server, three arrivals together, a second each: they wait 0, 1 and 2 s.
    assert fifo_waits([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], 1) == [0.0, 1.0, 2.0]
    # Two servers: the third waits for the first free one, at 1 s.
    assert fifo_waits([0.0, 0.0, 0.5], [1.0, 2.0, 1.0], 2) == [0.0, 0.0, 0.5]
    # An arrival after every server is free waits for none.
    assert fifo_waits([0.0, 3.0], [1.0, 1.0], 1) == [0.0, 0.0]


def test_a_shards_arrivals_follow_the_load_test() -> None:
    load = Load()
    arrivals = shard_arrivals(10, load, windows=2, spacing=0.004, seed=7)
    assert arrivals == sorted(arrivals)
    # Per table and window: 4 players of 2 to 4 appends (bets and a Deal), and one close.
    assert 10 * 2 * (4 * 2 + 1) <= len(arrivals) <= 10 * 2 * (4 * 4 + 1)
    # The timer closes four windows at once, 4 ms each: ten tables' closes take three rounds.
    closes_only = Load(players=0)
    spread = shard_arrivals(10, closes_only, windows=1, spacing=0.004, seed=7)
    assert spread == pytest.approx([3.0] * 4 + [3.004] * 4 + [3.008] * 2)
    together = shard_arrivals(10, closes_only, 1, 0.004, 7, closes_at_once=True)
    assert together == [3.0] * 10


def test_erlang_c_bounds_the_simulated_shard() -> None:
    # A shard at 60% of 8 cores, 1 ms an append: the formula at the burst's rate is the upper
    # bound of the seeded simulation's p99 wait, with exponential or fixed service times.
    tables = round(0.6 * 8_000 / (13 / 3 * 1.4))
    result = check(tables, 8, costs(), Load(), windows=5)
    assert result.simulated_fixed_p99_ms <= result.simulated_p99_ms <= result.erlang_p99_ms
    assert result.closes_at_once_p99_ms > result.erlang_p99_ms
