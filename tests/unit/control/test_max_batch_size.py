"""The tokens-per-batch-size table ends at the engine's max_num_seqs, the smallest the ready pods report."""

from __future__ import annotations

import pytest

from tide_operator.api import parse_spec
from tide_operator.control import actions as act
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide
from tide_operator.control.spec_params import DEFAULT_MAX_BATCH_SIZE, fleet_max_batch_size, policy_params
from tide_operator.control.speculation import SpeculationState

TABLE_TO_256 = ((1, 16, 3), (17, 256, 1))


@pytest.mark.parametrize(("reported", "table", "cap"), [
    ([128, 64, 96], None, 64),  # the smallest: no pod is asked for a batch it cannot schedule
    ([128, None], None, 128),  # an older plugin reports nothing: the others decide
    ([], None, DEFAULT_MAX_BATCH_SIZE),  # nobody reports and no table yet
    ([None], ((1, 4, 3), (5, 48, 1)), 48),  # nobody reports: the table in force keeps its cap
    ([0, 32], None, 32),  # nonsense is ignored
])
def test_the_cap_is_the_smallest_reported_max_num_seqs(reported: list[int | None], table: tuple | None,
                                                       cap: int) -> None:
    assert fleet_max_batch_size(reported, table) == cap


def test_policy_params_carry_the_cap_and_the_uid() -> None:
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}}})
    params = policy_params(spec, max_batch_size=64, deployment_uid="uid-1")
    assert (params.max_batch_size, params.deployment_uid) == (64, "uid-1")
    assert policy_params(spec).max_batch_size == 256


def _speculating() -> PolicyState:
    return PolicyState(speculation=SpeculationState(enabled=True, changed_at=0.0), acceptance_estimate=0.7,
                       table=TABLE_TO_256, table_acceptance=0.7)


def test_a_new_cap_retunes_the_table_to_end_there() -> None:
    idle = Observation(batch_size=4.0, promoted_version="v1")  # no acceptance data: the estimate stands
    actions, state = decide(idle, _speculating(), PolicyParams(target_revision="r1", max_batch_size=64), 100.0)
    retune = [a for a in actions if isinstance(a, act.SetSpeculation)]
    assert len(retune) == 1
    assert retune[0].tokens_per_batch_size is not None
    assert retune[0].tokens_per_batch_size[-1][1] == 64
    assert state.table == retune[0].tokens_per_batch_size
    # The same cap next pass: nothing to retune.
    again, _ = decide(idle, state, PolicyParams(target_revision="r1", max_batch_size=64), 160.0)
    assert not any(isinstance(a, act.SetSpeculation) for a in again)
