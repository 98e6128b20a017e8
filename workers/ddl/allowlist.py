"""The Spark built-in functions an MV query may call, by family, and why each family is safe.

An MV query is code from outside that a worker runs as its own user, so it may compute only what a
materialized view needs: values derived from the rows it reads. Every family below is a pure function
of its arguments (or of the run's clock / a random seed) evaluated inside Spark's JVM with no access to
files, the network, Java classes or other processes. Anything not named here is refused, so a function
Spark adds in a later version stays refused until someone reads it and adds it.

Left out on purpose (operators can still allow a name with ``MVS_ALLOWED_FUNCTIONS``):

* ``reflect``, ``java_method``, ``try_reflect``: call any static Java method, i.e. run code.
* ``from_avro``, ``to_avro``, ``schema_of_avro``, ``from_protobuf``, ``to_protobuf``: load schemas or
  descriptor files and classes named by the caller.
* ``input_file_name``, ``input_file_block_start``, ``input_file_block_length``: expose storage paths, and
  mean nothing over pinned table versions.
* the XML family (``xpath*``, ``from_xml``, ``schema_of_xml``, ``to_xml``): an XML parser over user data
  is a classic entity-expansion/external-entity surface; not needed by MVs.
* table-valued functions (``range``, ``explode`` … used as a table) and ``LATERAL VIEW``: they are not
  reads of warehouse tables. Generators called in the SELECT list (``explode(arr)``) are allowed.
* user-defined functions of any kind (Java, Scala, Python, Hive): unknown names are refused.

Names are Spark's (lower case), as registered in Spark 4.0.1's function registry; the integration tests
check that each one is a real Spark built-in.
"""

from __future__ import annotations

from collections.abc import Iterable


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Aggregates: fold the rows of a group into a value.
AGGREGATE = _names(
    """
    any any_value approx_count_distinct approx_percentile array_agg avg bit_and bit_or bit_xor
    bitmap_construct_agg bitmap_or_agg bool_and bool_or collect_list collect_set corr count count_if
    count_min_sketch covar_pop covar_samp every first first_value grouping grouping_id histogram_numeric
    hll_sketch_agg hll_union_agg kurtosis last last_value listagg max max_by mean median min min_by mode
    percentile percentile_approx percentile_cont percentile_disc regr_avgx regr_avgy regr_count
    regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy skewness some std stddev stddev_pop
    stddev_samp string_agg sum try_avg try_sum var_pop var_samp variance
    """
)

# Ranking and offset functions over a window of rows.
WINDOW = _names("cume_dist dense_rank lag lead nth_value ntile percent_rank rank row_number")

# Arithmetic, rounding, trigonometry, number bases; rand/randn/random/uniform are seeded generators.
MATH = _names(
    """
    abs acos acosh asin asinh atan atan2 atanh bin bround cbrt ceil ceiling conv cos cosh cot csc degrees
    div e exp expm1 factorial floor greatest hex hypot least ln log log10 log1p log2 mod negative pi pmod
    positive pow power radians rand randn random rint round sec sign signum sin sinh sqrt tan tanh try_add
    try_divide try_mod try_multiply try_subtract unhex uniform width_bucket
    """
)

# Bit operations on integers.
BITWISE = _names("bit_count bit_get getbit shiftleft shiftright shiftrightunsigned")

# String manipulation, formatting, regular expressions (Java regex over the value only).
STRING = _names(
    """
    ascii base64 bit_length btrim char char_length character_length chr collate collation concat_ws
    contains decode elt encode endswith find_in_set format_number format_string initcap instr
    is_valid_utf8 lcase left len length levenshtein locate lower lpad ltrim luhn_check make_valid_utf8
    mask octet_length overlay position printf randstr regexp_count regexp_extract regexp_extract_all
    regexp_instr regexp_replace regexp_substr repeat replace right rpad rtrim sentences soundex space split
    split_part startswith substr substring substring_index to_binary to_char to_number to_varchar
    translate trim try_to_binary try_to_number try_validate_utf8 ucase unbase64 upper validate_utf8
    """
)

# Dates, times, intervals and time windows; current_* read the run's clock.
DATETIME = _names(
    """
    add_months convert_timezone curdate current_date current_timestamp current_timezone date_add
    date_diff date_format date_from_unix_date date_part date_sub date_trunc dateadd datediff datepart day
    dayname dayofmonth dayofweek dayofyear extract from_unixtime from_utc_timestamp hour last_day
    localtimestamp make_date make_dt_interval make_interval make_timestamp make_timestamp_ltz
    make_timestamp_ntz make_ym_interval minute month monthname months_between next_day now quarter second
    session_window timestamp_micros timestamp_millis timestamp_seconds to_date to_timestamp
    to_timestamp_ltz to_timestamp_ntz to_unix_timestamp to_utc_timestamp trunc try_make_interval
    try_make_timestamp try_make_timestamp_ltz try_make_timestamp_ntz try_to_timestamp unix_date
    unix_micros unix_millis unix_seconds unix_timestamp weekday weekofyear window window_time year
    """
)

# Conditionals, NULL handling, predicates and type conversions.
CONDITIONAL = _names(
    """
    between coalesce if ifnull nanvl nullif nullifzero nvl nvl2 when zeroifnull
    equal_null ilike in isnan isnotnull isnull like not and or regexp regexp_like rlike
    bigint binary boolean cast date decimal double float int smallint string timestamp tinyint
    """
)

# Building and taking apart arrays, maps and structs; higher-order functions apply SQL lambdas.
COLLECTION = _names(
    """
    array array_append array_compact array_contains array_distinct array_except array_insert
    array_intersect array_join array_max array_min array_position array_prepend array_remove
    array_repeat array_size array_union arrays_overlap arrays_zip flatten get sequence shuffle slice
    sort_array cardinality concat element_at reverse size try_element_at
    map map_concat map_contains_key map_entries map_from_arrays map_from_entries map_keys map_values
    str_to_map named_struct struct
    aggregate array_sort exists filter forall map_filter map_zip_with reduce transform transform_keys
    transform_values zip_with
    """
)

# Generators in the SELECT list: one input row to several output rows (not as a table: see above).
GENERATOR = _names("explode explode_outer inline inline_outer posexplode posexplode_outer stack")

# Hashes, encryption with a caller-given key, sketches: pure functions of their arguments.
HASH_AND_SKETCH = _names(
    """
    crc32 hash md5 sha sha1 sha2 xxhash64 aes_decrypt aes_encrypt try_aes_decrypt bitmap_bit_position
    bitmap_bucket_number bitmap_count hll_sketch_estimate hll_union
    """
)

# Semi-structured text in a column: JSON, CSV, variant, URLs (parsing values, never fetching them).
SEMI_STRUCTURED = _names(
    """
    from_json get_json_object json_array_length json_object_keys json_tuple schema_of_json to_json
    from_csv schema_of_csv to_csv
    is_variant_null parse_json schema_of_variant schema_of_variant_agg to_variant_object try_parse_json
    try_variant_get variant_get
    parse_url try_parse_url try_url_decode url_decode url_encode
    """
)

# Harmless session facts, checks and ids (no state changes, no I/O).
MISC = _names(
    """
    assert_true raise_error typeof version uuid monotonically_increasing_id spark_partition_id
    current_catalog current_database current_schema current_user session_user user
    """
)

BUILTIN_FUNCTIONS: frozenset[str] = (
    AGGREGATE
    | WINDOW
    | MATH
    | BITWISE
    | STRING
    | DATETIME
    | CONDITIONAL
    | COLLECTION
    | GENERATOR
    | HASH_AND_SKETCH
    | SEMI_STRUCTURED
    | MISC
)

# Refused with a message that says why; never allowed by the built-in list.
REFLECTION = frozenset({"reflect", "java_method", "try_reflect"})


def allowed_functions(extra: Iterable[str] = ()) -> frozenset[str]:
    """The built-in allow-list plus ``extra`` (operator-allowed names), all lower case."""
    return BUILTIN_FUNCTIONS | {name.strip().lower() for name in extra if name.strip()}


def refusal(name: str) -> str:
    """Why calling function ``name`` is refused, for the user (completes nothing: a whole sentence)."""
    shown = name.lower()
    if shown in REFLECTION:
        return f"function {shown}() is not allowed: reflection calls Java code, which an MV query may not run"
    return (
        f"function {shown}() is not allowed in an MV query: only built-in functions on the allow-list "
        "may be called (an operator can allow more by name with MVS_ALLOWED_FUNCTIONS)"
    )
