"""The REST API (`mvs serve`), the Kafka Connect way: FastAPI routes over ``workers.client``, answers
shaped by ``workers.views`` (the same shapes as ``--output json``), errors as
``{"error_code": …, "message": …}``. Imports no Spark: the API never starts a JVM."""
