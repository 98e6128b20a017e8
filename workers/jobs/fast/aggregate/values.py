"""SUM and AVG of a group from its exact helper state (non-NULL count, exact sum), as Spark computes
them over the group's rows — and when that cannot be guaranteed, a condition saying "recompute".

Exact sums are DECIMALs (``sum_type``): integers and decimals exactly; a DOUBLE/FLOAT value by the
decimal Spark casts it to (its shortest round-trip digits, at scale 18) when that decimal casts back
to the very same double ("fits"), which bounds each value's error by half an ulp (2^-53 relative).
Values that do not fit (|x| >= 1e19, more than 18 fractional digits, NaN, ±Infinity) are counted
apart, and a group holding one is recomputed from the base while it does.

How close to recomputation (the property tests accept 1e-9 relative for floats):

* COUNT, SUM of integers and decimals: equal (SUM of integers past the BIGINT range: recomputed).
* AVG of integers: double(exact sum) / count, bit for bit Spark's whenever Spark's own double running
  sum is exact (all its partial sums below 2^53), else the more accurate of the two.
* SUM/AVG of doubles: the exact sum of the fitting values, rounded once. Spark's recomputation sums
  in an unspecified order, with error up to (n-1)·2^-53·Σ|x|; ours is within 2^-53·Σ|x| of the true
  sum, so the two agree within Spark's own error bound — a cancellation such as +1e19, +1, -1e19
  gives exactly 1 (a running double sum would give 0).
* AVG of DECIMAL(p, s): Spark's type DECIMAL(p+4, s+4) and its rounding. For p+4 <= 15 Spark's
  optimizer computes it in doubles (``DecimalAggregates``: avg of the unscaled longs / 10^s, cast
  HALF_UP): replayed with the same operations, equal while the unscaled sum is below 2^53. Else
  Spark divides at 39 digits HALF_UP and rounds HALF_UP to s+4; ``try_divide`` here rounds to its
  own result scale r first. Both equal the single HALF_UP rounding of sum/count when
  2·count < 10^(r - (s+4)) (a quotient with denominator count is at least 1/(2·count·10^(s+4)) away
  from a rounding tie): outside that bound the group is recomputed.
"""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, DoubleType, FloatType, IntegralType

__all__ = ["avg_value", "held", "sum_type", "sum_value"]

_FLOAT_SCALE = 18
_HELD_PRECISION = 37  # one digit below 38: adding two held sums never loses a digit
_MAX_DOUBLE_DIGITS = 15  # Spark's DecimalAggregates bound for AVG in doubles
_EXACT_DOUBLE = 2**53


def sum_type(dtype: DataType) -> DecimalType | None:
    """The DECIMAL an exact sum of a column of ``dtype`` is kept in (None: none can be)."""
    if isinstance(dtype, IntegralType):
        return DecimalType(_HELD_PRECISION, 0)
    if isinstance(dtype, DoubleType | FloatType):
        return DecimalType(_HELD_PRECISION, _FLOAT_SCALE)
    if isinstance(dtype, DecimalType) and dtype.scale <= _HELD_PRECISION - 7:
        return DecimalType(_HELD_PRECISION, dtype.scale)
    return None


def held(value: Column, dtype: DataType) -> tuple[Column, Column]:
    """(the exact DECIMAL of a value, whether it fits there exactly); NULL values never fit."""
    target = sum_type(dtype)
    if target is None:
        return F.lit(None).cast(DecimalType(_HELD_PRECISION, 0)), F.lit(False)
    if isinstance(dtype, DoubleType | FloatType):
        as_double = value.cast("double")
        decimal = as_double.try_cast(target)
        return decimal, decimal.isNotNull() & (decimal.cast("double") == as_double)
    decimal = value.try_cast(target)
    return decimal, decimal.isNotNull()


def sum_value(total: Column, out: DataType) -> Column:
    """SUM in the query's output type from the exact sum (NULL when it does not fit there)."""
    if isinstance(out, DoubleType | FloatType):
        return total.cast(out)
    return total.try_cast(out)


def avg_value(frame: DataFrame, total: Column, count: Column, dtype: DataType) -> tuple[Column, Column]:
    """(AVG as Spark computes it over values of ``dtype``, whether that is guaranteed) from the
    exact sum and the non-NULL count (> 0). ``frame`` is where the columns live (to read the
    division's type from Spark's own analysis)."""
    if not isinstance(dtype, DecimalType):
        return total.cast("double") / count.cast("double"), F.lit(True)
    p, s = dtype.precision, dtype.scale
    out = DecimalType(min(38, p + 4), min(38, s + 4))
    if p + 4 <= _MAX_DOUBLE_DIGITS:  # Spark: CAST(avg(unscaled) / 10^s AS DECIMAL(p+4, s+4))
        unscaled = (total.try_cast(DecimalType(16, s)) * F.lit(Decimal(10**s))).cast("long")
        value = (unscaled.cast("double") / count.cast("double") / F.lit(float(10**s))).try_cast(out)
        return value, unscaled.isNotNull() & (F.abs(unscaled) < F.lit(_EXACT_DOUBLE))
    numerator = total.try_cast(DecimalType(min(38, p + 10), s))  # Spark's sum buffer type
    quotient = F.try_divide(numerator, count.cast(DecimalType(20, 0)))
    divided = frame.select(quotient.alias("q")).schema["q"].dataType
    assert isinstance(divided, DecimalType)
    spare = divided.scale - out.scale  # digits try_divide keeps beyond the result's
    if spare <= 0:
        return F.lit(None).cast(out), F.lit(False)
    exact = F.lit(True) if spare >= 19 else count * 2 < F.lit(10**spare)
    return quotient.try_cast(out), exact
