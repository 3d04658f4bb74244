"""Random play through the API over the in-memory store keeps the books balanced every step."""

from hypothesis import HealthCheck, settings

from tests.stateful import ShoeboxMachine


class InMemoryPlay(ShoeboxMachine):
    """The machine over the in-memory store: fast enough for many sequences."""


# Derandomized, so that CI replays the same sequences; a failure shrinks to a short one.
InMemoryPlay.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_random_play_keeps_the_books_balanced_at_every_step = InMemoryPlay.TestCase
