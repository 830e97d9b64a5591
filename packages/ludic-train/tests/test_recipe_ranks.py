"""How a recipe reads its place in a ``torchrun`` launch (the launches themselves run in tests/cli)."""

from __future__ import annotations

import pytest

from ludic_core.errors import ConfigError
from ludic_core.run.ranks import Ranks, launched_ranks


def test_a_plain_run_is_rank_0_of_1_and_torchrun_sets_the_rest() -> None:
    assert launched_ranks({}) == Ranks(0, 1, 0)
    ranks = launched_ranks({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert ranks == Ranks(3, 4, 1) and ranks.distributed and not ranks.main


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RANK": "one"}, "RANK='one': expected an int"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "expected 0 <= RANK < WORLD_SIZE"),
        ({"WORLD_SIZE": "0"}, "expected 0 <= RANK < WORLD_SIZE"),
    ],
)
def test_a_bad_launch_environment_is_named(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        launched_ranks(environ)
