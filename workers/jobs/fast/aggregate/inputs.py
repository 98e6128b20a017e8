"""The seam between whatever produces an aggregate's signed change rows and ``aggregate_merge``: the
aggregate's input relation at the version(s) the run pins (``InputAtV``).

``aggregate_merge`` folds signed rows of the aggregate's input (one base's MV-log rows, a join's
rows from its delta rules, or any operator's output) into per-group deltas; it is linear in them.
What it cannot get from those rows alone it asks of ``InputAtV``, the same way whatever produced
them:

* ``rows()``: every row of the input at v, to rebuild the helper state (first run, or a state that
  cannot be trusted). Read only then, in one pass.
* ``groups(wanted)``: the MV query's own rows of some groups over the input at v, for the groups no
  rule can derive exactly (MIN/MAX whose extreme was deleted, a floating sum holding a value too
  large or too fine to keep, the odd case ``rules`` cannot prove).

A producer of change rows builds one ``InputAtV`` for its input and hands it over with the rows:
``workers.jobs.fast.inputs.base_input`` (one base), ``workers.jobs.fast.join.joined_inputs`` (a join).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame

__all__ = ["GroupRecompute", "InputAtV"]

# The MV query's rows of the groups ``wanted`` lists (a superset is fine), or of every group for None.
# ``wanted`` holds one column per GROUP BY key, in the plan's ``group_by`` order (named by the MV's
# key columns); its values are matched NULL-safely (a NULL key is a group).
GroupRecompute = Callable[[DataFrame | None], DataFrame]


@dataclass(frozen=True)
class InputAtV:
    """The aggregate's input relation at the pinned version(s).

    ``rows``: its rows, holding the columns the plan's GROUP BY and aggregates read, named as the plan
    names them (``FastRefreshPlan.group_by``, ``AggregateItem.column``; an expression argument's
    derived column may be left out: it is computed from ``AggregateItem.argument``); a ``plan.where``
    is applied to them by ``aggregate_merge`` as to the change rows (aliased by ``plan.qualifier``),
    so a producer that filters its rows itself hands over a plan without one.
    ``groups``: see ``GroupRecompute``. ``changes`` and ``source`` name, in the run message, what the
    change rows are ("the join's change rows") and what a group is recomputed or the state rebuilt
    from ("the bases")."""

    rows: Callable[[], DataFrame]
    groups: GroupRecompute
    changes: str
    source: str
