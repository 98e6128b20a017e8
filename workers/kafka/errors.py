"""Errors of the bus, with the librdkafka flags role code decides on (retry, abort, give up)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

# Codes that mean "the cluster is (briefly) unreachable or busy", even when librdkafka does
# not flag them retriable (admin and metadata requests, mostly).
TRANSIENT_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._DESTROY_BROKER,  # a broker handle dropped as a dead broker leaves the metadata
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_CONTROLLER,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)
FENCED_CODES = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.FENCED_INSTANCE_ID,
    }
)
# Codes only an operator can fix: wrong credentials, missing ACLs, a topic nobody created. A role
# exits on one of these only when it persists (see workers.role): right after `mvs topics apply` or an
# ACL change a broker may still answer with them for a moment.
MISCONFIG_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError._UNKNOWN_TOPIC,
    }
)


class BusError(RuntimeError):
    """A Kafka operation failed. ``retriable``: try again; ``abort_required``: abort the
    transaction and redo it; ``fatal``: this client is unusable (``fenced``: another instance
    with the same transactional id took over); ``misconfigured``: only an operator can fix it
    (credentials, ACLs, a missing topic)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        retriable: bool = False,
        abort_required: bool = False,
        fatal: bool = False,
        fenced: bool = False,
        misconfigured: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable
        self.abort_required = abort_required
        self.fatal = fatal
        self.fenced = fenced
        self.misconfigured = misconfigured

    @classmethod
    def from_kafka(cls, what: str, error: KafkaError | KafkaException | BaseException) -> BusError:
        """Wrap a librdkafka error; ``what`` says which operation failed."""
        err = error.args[0] if isinstance(error, KafkaException) and error.args else error
        if not isinstance(err, KafkaError):
            transient = isinstance(error, TimeoutError)
            return cls(f"{what}: {type(error).__name__}: {error}", retriable=transient)
        return cls(
            f"{what}: {err.name()}: {err.str()}",
            code=err.name(),
            retriable=err.retriable() or err.code() in TRANSIENT_CODES,
            abort_required=err.txn_requires_abort(),
            fatal=err.fatal(),
            fenced=err.code() in FENCED_CODES,
            misconfigured=err.code() in MISCONFIG_CODES,
        )


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the cluster may answer differently in a moment."""
    if isinstance(exc, BusError):
        return exc.retriable and not exc.fatal and not exc.abort_required
    if isinstance(exc, KafkaException):
        return is_transient(BusError.from_kafka("", exc))
    return isinstance(exc, TimeoutError)
