"""The sizing model behind docs/scaling.md's "Beyond one primary": pure arithmetic, no I/O.

bench/shards.py measures this machine's per-append costs and feeds them here; the unit test
(tests/unit/test_shards_model.py) checks the math on hand-worked cases, so the figures in the
doc cannot drift from the model that made them.

Why a queueing model (Erlang C, M/M/K) and not a discrete-event simulation: an append holds a
core for about a millisecond, while the load's shape changes over seconds (a 3 s window whose
last 1.5 s carry 70% of the bets). Within a burst the arrival rate is steady for a thousand
service times, so the queue reaches its steady state and a quasi-stationary M/M/K at the
burst's rate describes it; the arrivals are the sum of many independent tables, which is close
to Poisson whatever each table does (Palm-Khintchine). Exponential service times are the
pessimistic choice for appends whose CPU barely varies (an M/D/K waits about half as long),
so the waits below are upper bounds rather than estimates. The one serial part, a shard's
sequencer, is a batch server and is modelled as one: see `sequencer_cycle`. `check` runs a
seeded discrete-event simulation of one shard at the load's real shape (aligned windows, the
players' turns, the timer's closes) to test those claims: its p99 wait must stay at or below
the formula's, and it shows what the formula cannot (every close arriving at once).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass


def erlang_c(servers: int, offered: float) -> float:
    """The probability that an arrival waits, in an M/M/`servers` queue offered `offered` Erlangs.

    Computed through Erlang B's recurrence, which never forms a factorial and so stays exact
    for hundreds of servers. 1.0 when the queue is unstable (offered >= servers).
    """
    if servers < 1:
        raise ValueError("at least one server")
    if offered < 0:
        raise ValueError("offered load is not negative")
    if offered >= servers:
        return 1.0
    blocking = 1.0  # Erlang B with no servers
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    utilisation = offered / servers
    return blocking / (1 - utilisation + utilisation * blocking)


def wait_quantile(servers: int, rate: float, service: float, quantile: float) -> float:
    """The `quantile` of an arrival's wait for a server (seconds) in M/M/`servers`.

    P(W > t) = C * exp(-(servers/service - rate) * t); zero when fewer than 1 - quantile of
    the arrivals wait at all. Infinite when the queue is unstable.
    """
    offered = rate * service
    if offered >= servers:
        return math.inf
    waiting = erlang_c(servers, offered)
    tail = 1 - quantile
    if waiting <= tail:
        return 0.0
    return math.log(waiting / tail) / (servers / service - rate)


@dataclass(frozen=True, slots=True)
class Costs:
    """What one append costs, measured (bench/shards.py --measure), all in milliseconds."""

    append_backend_cpu_ms: float  # PostgreSQL backend CPU of one bet-shaped append
    append_p50_ms: float  # an append's wall time, one client, the flush included
    append_p99_ms: float
    sequencer_batch_cpu_ms: float  # the sequencer backend's CPU a batch, fixed part
    sequencer_append_cpu_ms: float  # ... and per append in the batch
    sequencer_batch_wall_ms: float  # a batch's wall time, fixed part (its commit's flush too)
    sequencer_append_wall_ms: float  # ... and per append in the batch
    web_cpu_per_bet_ms: float  # the web tier's CPU a bet (not a shard's; sized apart)


@dataclass(frozen=True, slots=True)
class Load:
    """One table's traffic, as bench/load.py plays it (defaults), and the shard's deployment."""

    players: int = 4
    bets_per_player: float = 2.0  # one to three a window, uniformly
    window_seconds: float = 3.0
    other_appends_per_window: float = 1.0  # the window's close (the Deals are counted apart)
    burst_share: float = 0.7  # of a window's turns start in its last burst_seconds
    burst_seconds: float = 1.5
    sequencer_poll_ms: float = 1.0  # the role's pause after a batch that found appends
    standby_ms: float = 1.0  # a synchronous standby's round trip and flush: ASSUMED
    network_ms: float = 0.2  # one more LAN round trip from a web host to a shard: ASSUMED
    closers: int = 4  # windows a worker's timer closes at once (service/runtime/scheduler.py)

    @property
    def bets_per_second(self) -> float:
        """A table's bets a second, on average over its windows."""
        return self.players * self.bets_per_player / self.window_seconds

    @property
    def appends_per_second(self) -> float:
        """A table's appends a second on its own shard: bets, a Deal per player, the close."""
        per_window = self.players * (self.bets_per_player + 1) + self.other_appends_per_window
        return per_window / self.window_seconds

    @property
    def peak_factor(self) -> float:
        """The burst's rate over the mean: every table's window aligned (the worst case)."""
        return self.burst_share * self.window_seconds / self.burst_seconds


@dataclass(frozen=True, slots=True)
class Saga:
    """What an internal-wallet bet costs when the player's wallet is on another shard."""

    failure_share: float = 0.02  # bets refused after their stake was reserved (late, limits)

    def appends_per_bet(self, bets_per_round: float) -> float:
        """Appends a cross-shard bet makes, both shards together, against one for a local bet.

        Reserve on the wallet's shard, then the bet on the table's; a refused bet's stake is
        released (a compensating append on the wallet's shard); and the round's settlement,
        written by the Deal's append when the wallet is local, becomes one append on the
        wallet's shard per player and round, shared by that player's bets.
        """
        return 2 + self.failure_share + 1 / bets_per_round

    @staticmethod
    def round_trips_on_path() -> int:
        """Sequential round trips before the bet is answered: the reservation, then the bet."""
        return 2


def cross_shard_share(shards: int) -> float:
    """How many bets meet a wallet on another shard: wallets homed by a hash of the player, a
    player at any table (no affinity), so a bet's table is on the wallet's shard 1/N of the time."""
    return 1 - 1 / shards


def sequencer_cycle(rate: float, costs: Costs, poll_ms: float) -> float:
    """Seconds between a shard's sequencer batches at `rate` appends a second; inf if behind.

    A batch takes every append committed while the previous one ran, plus the poll: T =
    fixed + per_append * rate * T + poll, so T = (fixed + poll) / (1 - per_append * rate).
    """
    per_append = costs.sequencer_append_wall_ms / 1000
    busy = per_append * rate
    if busy >= 1:
        return math.inf
    return (costs.sequencer_batch_wall_ms + poll_ms) / 1000 / (1 - busy)


@dataclass(frozen=True, slots=True)
class ShardFigures:
    """One shard at its peak, and the fleet of them."""

    tables: int
    shards: int
    tables_per_shard: float
    appends_per_second: float  # one shard's, at the burst's peak
    cpu_utilisation: float  # of the shard's cores, at the peak
    sequencer_busy: float  # of the sequencer's time, at the peak
    sequencer_lag_p99_ms: float  # about two cycles: the batch under way, then its own
    bet_p99_ms: float  # append p99 + standby + the p99 wait for a core
    cross_share: float  # internal wallets: bets whose wallet is on another shard
    saga_bet_p99_ms: float  # an internal bet across shards: two appends in sequence
    extra_appends_per_bet: float  # internal wallets, over seamless, the fleet's average
    root_appends_per_second: float  # the global root: one small append a checkpoint interval
    proof_hashes: int  # a global inclusion proof's extra hashes: the shard head in the root
    limit: str  # what set the shard's size: "cores", "sequencer", or "none" (one shard is enough)


def shard_cpu_ms(rate: float, costs: Costs, poll_ms: float) -> float:
    """A shard's PostgreSQL CPU (ms a second) at `rate` appends a second: appends + sequencer."""
    cycle = sequencer_cycle(rate, costs, poll_ms)
    batches = 0.0 if math.isinf(cycle) else 1 / cycle
    sequencer = batches * costs.sequencer_batch_cpu_ms + rate * costs.sequencer_append_cpu_ms
    return rate * costs.append_backend_cpu_ms + sequencer


def shard_rate(tables_per_shard: float, load: Load, extra_appends_per_bet: float) -> float:
    """A shard's appends a second at the burst's peak, its wallets' saga appends included."""
    per_table = load.appends_per_second + load.bets_per_second * extra_appends_per_bet
    return tables_per_shard * per_table * load.peak_factor


def size(
    tables: int,
    cores: int,
    costs: Costs,
    load: Load,
    *,
    internal_wallets: bool,
    saga: Saga | None = None,
    cpu_target: float = 0.6,
    sequencer_target: float = 0.5,
    checkpoint_seconds: float = 60.0,
) -> ShardFigures:
    """The fewest shards of `cores` cores that keep every shard within its targets at the peak."""
    saga = saga or Saga()
    shards = 1
    while True:
        cross = cross_shard_share(shards) if internal_wallets else 0.0
        extra = cross * (saga.appends_per_bet(load.bets_per_player) - 1)
        per_shard = tables / shards
        rate = shard_rate(per_shard, load, extra)
        cpu = shard_cpu_ms(rate, costs, load.sequencer_poll_ms) / 1000 / cores
        busy = rate * costs.sequencer_append_wall_ms / 1000
        if (cpu <= cpu_target and busy <= sequencer_target) or shards >= tables:
            break
        shards += 1
    if shards == 1:
        limit = "none"
    else:
        # What the shard count before this one broke first, relative to its target.
        fewer = shards - 1
        cross_fewer = cross_shard_share(fewer) if internal_wallets else 0.0
        rate_fewer = shard_rate(
            tables / fewer, load, cross_fewer * (saga.appends_per_bet(load.bets_per_player) - 1)
        )
        cpu_fewer = shard_cpu_ms(rate_fewer, costs, load.sequencer_poll_ms) / 1000 / cores
        busy_fewer = rate_fewer * costs.sequencer_append_wall_ms / 1000
        limit = "cores" if cpu_fewer / cpu_target >= busy_fewer / sequencer_target else "sequencer"
    service = shard_cpu_ms(rate, costs, load.sequencer_poll_ms) / 1000 / rate if rate else 0.0
    wait = wait_quantile(cores, rate, service, 0.99) * 1000 if rate else 0.0
    bet_p99 = costs.append_p99_ms + load.standby_ms + wait
    # Two appends in sequence, on two shards: the sum's p99 is below the sum of the p99s;
    # p99 + p50 is the usual reading when one of two independent waits is slow.
    saga_p99 = (
        costs.append_p99_ms
        + costs.append_p50_ms
        + 2 * (load.standby_ms + wait)
        + load.network_ms * (Saga.round_trips_on_path() - 1)
    )
    cycle = sequencer_cycle(rate, costs, load.sequencer_poll_ms)
    return ShardFigures(
        tables=tables,
        shards=shards,
        tables_per_shard=tables / shards,
        appends_per_second=rate,
        cpu_utilisation=cpu,
        sequencer_busy=busy,
        sequencer_lag_p99_ms=2 * cycle * 1000 + load.standby_ms,
        bet_p99_ms=bet_p99,
        cross_share=cross,
        saga_bet_p99_ms=saga_p99,
        extra_appends_per_bet=extra,
        root_appends_per_second=1 / checkpoint_seconds,
        proof_hashes=math.ceil(math.log2(shards)) if shards > 1 else 0,
        limit=limit,
    )


def fifo_waits(arrivals: list[float], services: list[float], servers: int) -> list[float]:
    """Each arrival's wait for one of `servers` first-come-first-served servers (seconds).

    `arrivals` in time order, `services` the matching service times: a discrete-event run of
    an M/G/K queue with any arrival process, used to check the Erlang C figures against the
    load's real shape (aligned bursts) rather than the Poisson arrivals the formula assumes.
    """
    free = [0.0] * servers  # when each server is next free: a heap
    waits = []
    for arrival, service in zip(arrivals, services, strict=True):
        earliest = heapq.heappop(free)
        start = max(arrival, earliest)
        waits.append(start - arrival)
        heapq.heappush(free, start + service)
    return waits


def shard_arrivals(
    tables: int,
    load: Load,
    windows: int,
    spacing: float,
    seed: int,
    *,
    closes_at_once: bool = False,
) -> list[float]:
    """The appends' arrival times at one shard of `tables` tables, every window aligned.

    As bench/load.py plays: each player's turn starts in the window's last `burst_seconds`
    with probability `burst_share` (else earlier), then one to three bets and a Deal, each
    `spacing` seconds after the last (an answered append). The windows' closes come from a
    timer that closes `closers` at once, each taking `spacing`; with `closes_at_once`, every
    table's close arrives at the window's end together (a close per table per window: the
    model's other appends are closes).
    """
    rng = random.Random(seed)
    times = []
    early = load.window_seconds - load.burst_seconds
    for window in range(windows):
        opens = window * load.window_seconds
        for _ in range(tables):
            for _ in range(load.players):
                if rng.random() < load.burst_share:
                    at = opens + early + rng.random() * load.burst_seconds
                else:
                    at = opens + rng.random() * early
                for n in range(rng.randint(1, 3) + 1):  # the bets, then the Deal
                    times.append(at + n * spacing)
        ends = opens + load.window_seconds
        for table in range(tables):
            for _ in range(round(load.other_appends_per_window)):
                late = 0.0 if closes_at_once else (table // load.closers) * spacing
                times.append(ends + late)
    times.sort()
    return times


@dataclass(frozen=True, slots=True)
class Check:
    """The Erlang C wait beside a discrete-event run of the same shard at the load's shape."""

    erlang_p99_ms: float  # at the burst's rate, Poisson arrivals, exponential service
    simulated_p99_ms: float  # aligned windows, the timer's closes, exponential service
    simulated_fixed_p99_ms: float  # the same, every append's service time the mean
    closes_at_once_p99_ms: float  # every table's close at the window's end together


def check(
    tables_per_shard: int, cores: int, costs: Costs, load: Load, windows: int = 10, seed: int = 1
) -> Check:
    """Erlang C's p99 wait for a core against a seeded discrete-event run of one shard."""
    spacing = costs.append_p50_ms / 1000
    rate = shard_rate(tables_per_shard, load, 0.0)
    service = shard_cpu_ms(rate, costs, load.sequencer_poll_ms) / 1000 / rate

    def p99(waits: list[float]) -> float:
        ordered = sorted(waits)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000

    arrivals = shard_arrivals(tables_per_shard, load, windows, spacing, seed)
    rng = random.Random(seed + 1)
    drawn = [rng.expovariate(1 / service) for _ in arrivals]
    spike = shard_arrivals(tables_per_shard, load, windows, spacing, seed, closes_at_once=True)
    return Check(
        erlang_p99_ms=wait_quantile(cores, rate, service, 0.99) * 1000,
        simulated_p99_ms=p99(fifo_waits(arrivals, drawn, cores)),
        simulated_fixed_p99_ms=p99(fifo_waits(arrivals, [service] * len(arrivals), cores)),
        closes_at_once_p99_ms=p99(fifo_waits(spike, drawn, cores)),
    )
