"""TPC-H as the yardstick of FAST refresh: its data and refresh functions (``data``), its 22 queries
(``queries``), and the benchmark (``python -m bench.tpch``, in ``__main__``)."""
