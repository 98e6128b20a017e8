"""The 22 TPC-H queries as the specification writes them, kept as data in ``sql/q01.sql`` …
``sql/q22.sql``: the validation substitution parameters of qgen, date arithmetic as written
(``date '1994-01-01' + interval '1' year``), Q15's view ``revenue0`` as a CTE, and the row counts
qgen sets for Q2, Q3, Q10, Q18 and Q21 as LIMIT. Spark SQL reads the spec's text as it is (interval
arithmetic on dates, ``extract(year FROM …)``, ``substring(… FROM 1 FOR 2)``, a derived table's
column list in Q13): no dialect change was needed. Q18's ``sum(l_quantity)`` stays unnamed, as
written. Q11's fraction is the SF 1 value (0.0001) at every scale factor, as in the validation run.
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).parent / "sql"


def load_queries() -> dict[str, str]:
    """``{"q01": sql, …, "q22": sql}`` in query order."""
    return {path.stem: path.read_text() for path in sorted(FOLDER.glob("q*.sql"))}
