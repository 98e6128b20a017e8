"""Object-store warehouse settings: URI mapping, what the environment gives Spark's S3A and the no-JVM
log readers, and secrets kept out of ``repr``."""

from __future__ import annotations

from workers.config import Settings, StorageSettings, spark_location
from workers.warehouse import is_local, table_path, warehouse_location

SECRET = "wJalrXUtnFEMI-example-secret"
S3_ENV = {
    "MVS_WAREHOUSE": "s3://lake/mvs/",
    "MVS_S3_ENDPOINT": "http://127.0.0.1:7070",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": SECRET,
}


def test_s3_and_s3n_are_addressed_as_s3a_and_other_schemes_stay() -> None:
    assert spark_location("s3://b/p") == "s3a://b/p"
    assert spark_location("S3N://b/p") == "s3a://b/p"
    for kept in ("s3a://b/p", "gs://b/p", "abfss://c@a.dfs.core.windows.net/p", "file:///w", "/w", "w"):
        assert spark_location(kept) == kept


def test_an_s3_warehouse_from_the_environment_is_one_s3a_location_for_every_table() -> None:
    settings = Settings.from_env(S3_ENV)
    assert settings.warehouse == "s3a://lake/mvs/"
    assert warehouse_location(settings) == "s3a://lake/mvs"
    assert table_path(settings, "sales") == "s3a://lake/mvs/sales"
    # Settings built directly (not from the environment) map the same way.
    assert table_path(Settings(warehouse="s3://lake/mvs"), "sales") == "s3a://lake/mvs/sales"
    assert not is_local(settings) and is_local(Settings(warehouse="/tmp/w"))


def test_endpoint_and_credentials_reach_both_readers() -> None:
    storage = Settings.from_env(S3_ENV).storage
    assert storage.delta_rs_options() == {
        "aws_endpoint_url": "http://127.0.0.1:7070",
        "aws_region": "us-east-1",
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": SECRET,
        "aws_virtual_hosted_style_request": "false",
        "aws_allow_http": "true",
    }
    assert storage.hadoop_options() == {
        "fs.s3a.endpoint": "http://127.0.0.1:7070",
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.access.key": "AKIDEXAMPLE",
        "fs.s3a.secret.key": SECRET,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
    }


def test_aws_s3_itself_needs_no_endpoint_and_nothing_is_set_without_configuration() -> None:
    assert StorageSettings.from_env({}).delta_rs_options() == {}
    assert StorageSettings.from_env({}).hadoop_options() == {}
    storage = StorageSettings.from_env({"AWS_DEFAULT_REGION": "eu-west-1", "AWS_SESSION_TOKEN": "tok"})
    assert storage.delta_rs_options() == {"aws_region": "eu-west-1", "aws_session_token": "tok"}
    assert storage.hadoop_options() == {"fs.s3a.endpoint.region": "eu-west-1", "fs.s3a.session.token": "tok"}


def test_https_endpoint_keeps_tls() -> None:
    storage = StorageSettings(endpoint="https://s3.example.net")
    assert storage.delta_rs_options()["aws_allow_http"] == "false"
    assert storage.hadoop_options()["fs.s3a.connection.ssl.enabled"] == "true"


def test_storage_pass_through_options_override_the_derived_ones() -> None:
    env = {
        **S3_ENV,
        "MVS_STORAGE_AWS_REGION": "auto",
        "MVS_STORAGE_AZURE_STORAGE_ACCOUNT_NAME": "acct",
        "MVS_STORAGE_TIMEOUT": "30s",
    }
    options = Settings.from_env(env).storage.delta_rs_options()
    assert options["aws_region"] == "auto"
    assert options["azure_storage_account_name"] == "acct" and options["timeout"] == "30s"


def test_secrets_are_not_in_the_settings_repr() -> None:
    settings = Settings.from_env({**S3_ENV, "AWS_SESSION_TOKEN": "tok-secret", "MVS_STORAGE_X": "opt-secret"})
    shown = repr(settings)
    assert "127.0.0.1:7070" in shown  # the endpoint is not a secret
    for secret in (SECRET, "AKIDEXAMPLE", "tok-secret", "opt-secret"):
        assert secret not in shown


def test_the_environment_of_a_child_process_reads_back_as_the_same_settings() -> None:
    env = {
        "MVS_S3_ENDPOINT": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "MVS_STORAGE_AWS_S3_LOCKING_PROVIDER": "dynamodb",
    }
    storage = StorageSettings.from_env(env)
    assert storage.environment() == env
    assert StorageSettings.from_env(storage.environment()) == storage
    assert StorageSettings().environment() == {}


def test_options_scoped_to_a_bucket_are_s3a_per_bucket_overrides() -> None:
    from workers.jobs.spark.session import s3a_bucket

    storage = StorageSettings(endpoint="http://127.0.0.1:7070")
    scoped = storage.hadoop_options("outage")
    assert scoped["fs.s3a.bucket.outage.endpoint"] == "http://127.0.0.1:7070"
    assert scoped["fs.s3a.bucket.outage.path.style.access"] == "true"
    assert not [key for key in scoped if not key.startswith("fs.s3a.bucket.outage.")]
    assert s3a_bucket("s3://outage/ns") == s3a_bucket("s3a://outage") == "outage"
    assert s3a_bucket("/tmp/warehouse") is None and s3a_bucket("gs://b/x") is None
