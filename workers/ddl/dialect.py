"""The SQL dialect every sqlglot call in ``workers.ddl`` reads and writes: the workers run MV
queries on Spark, so the DDL layer must read them as Spark does."""

DIALECT = "spark"
