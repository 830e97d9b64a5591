"""Which rollouts train, and their credited items.

A rollout makes no item when its episode failed (its last turn may be cut mid-way) or when its own
steps cannot be concatenated into tokens (:class:`~ludic_core.errors.UnbuildableRolloutError`). Either
way it is left out together with the rest of its GRPO group (a group with a missing member would get
a biased baseline), and counted: one bad rollout never fails the batch, and none vanishes unseen.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

from ludic_core.credit import CreditAssigner, credit_signature, group_key
from ludic_core.errors import DataError, UnbuildableRolloutError
from ludic_core.logs import get_logger
from ludic_core.retokenize import MessageTemplate
from ludic_core.saw import SAWItem
from ludic_core.saw_builder import rollout_to_saw_items
from ludic_core.types import Rollout

__all__ = ["CreditedItems", "credited_items", "select_trainable_rollouts"]

log = get_logger(__name__)


def _group_id(rollout: Rollout) -> str | None:
    try:
        return group_key(rollout)[0]
    except DataError:
        return None


def select_trainable_rollouts(
    rollouts: Sequence[Rollout], *, failed_ids: Collection[str] = ()
) -> tuple[list[Rollout], int, int]:
    """Drop failed rollouts (``failure`` set, or id in ``failed_ids``) and every rollout of a GRPO group
    that lost a member to a failure (its baseline would be biased).

    Returns ``(kept, number failed, number dropped as members of incomplete groups)``.
    """

    def failed(r: Rollout) -> bool:
        return r.failed or r.id in failed_ids

    failed_groups = {gid for r in rollouts if failed(r) for gid in [_group_id(r)] if gid is not None}
    ok = [r for r in rollouts if not failed(r)]
    kept = [r for r in ok if _group_id(r) not in failed_groups]
    return kept, len(rollouts) - len(ok), len(ok) - len(kept)


@attrs.frozen
class CreditedItems:
    """What :func:`credited_items` made, and what it left out."""

    items: list[SAWItem]
    rollouts: list[Rollout]
    """The rollouts the items came from, in input order."""
    num_failed: int
    """Rollouts of failed episodes."""
    num_dropped_incomplete_groups: int
    """Healthy rollouts left out because a member of their group failed or was unbuildable."""
    unbuildable: dict[str, str] = attrs.field(factory=dict)
    """Rollout id → why its steps made no item."""


def _items_or_unbuildable(
    rollouts: Sequence[Rollout],
    credit_assigner: CreditAssigner,
    retokenize_with: MessageTemplate | None,
) -> tuple[list[SAWItem], dict[str, str]]:
    weights = credit_assigner.compute(rollouts)
    signature = credit_signature(credit_assigner)
    items: list[SAWItem] = []
    unbuildable: dict[str, str] = {}
    for rollout in rollouts:
        try:
            built = rollout_to_saw_items(rollout, weights, retokenize_with=retokenize_with)
        except UnbuildableRolloutError as error:
            unbuildable[error.rollout_id] = error.reason
            continue
        for item in built:
            item.meta["credit"] = signature
        items.extend(built)
    return items, unbuildable


def credited_items(
    rollouts: Sequence[Rollout],
    credit_assigner: CreditAssigner,
    *,
    failed_ids: Collection[str] = (),
    retokenize_with: MessageTemplate | None = None,
) -> CreditedItems:
    """Credit the trainable rollouts and build one SAW item per turn (see the module docstring).

    ``failed_ids``: rollouts to treat as failed beyond those whose ``failure`` is set (the rollouts of
    a failed episode). When a rollout proves unbuildable, credit is computed again without it and its
    group, so no kept advantage was computed against a reward that no longer trains.
    """
    unbuildable: dict[str, str] = {}
    while True:
        kept, num_left_out, num_dropped = select_trainable_rollouts(
            rollouts, failed_ids={*failed_ids, *unbuildable}
        )
        items, newly_unbuildable = _items_or_unbuildable(kept, credit_assigner, retokenize_with)
        if not newly_unbuildable:
            break
        for rollout_id, reason in newly_unbuildable.items():
            log.warning("rollout.unbuildable", rollout_id=rollout_id, reason=reason)
        unbuildable.update(newly_unbuildable)  # each pass adds one at least: the loop ends
    return CreditedItems(
        items=items,
        rollouts=kept,
        num_failed=num_left_out - len(unbuildable),
        num_dropped_incomplete_groups=num_dropped,
        unbuildable=unbuildable,
    )
