//! Classification of Qdrant client errors into ragtune's error kinds, decided once, here.

use std::time::Duration;

use qdrant_client::QdrantError;
use ragtune_core::{Error, ErrorKind};
use tonic::Code;

/// Where a request went and what it was for, to write messages a user can act on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site<'a> {
    /// The server URL.
    pub(crate) url: &'a str,
    /// The per-request timeout the client was configured with.
    pub(crate) timeout: Duration,
    /// The connection timeout the client was configured with.
    pub(crate) connect_timeout: Duration,
}

/// A failed request, classified: its kind, a message, how long the server asked us to wait, and the cause.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
    /// The server's `retry-after`, for rate limiting.
    pub(crate) retry_after: Option<Duration>,
    /// The server answered, but one of its peers holding a replica did not (a cluster node is down).
    pub(crate) replica_down: bool,
    pub(crate) source: QdrantError,
}

impl Failure {
    /// The public error, noting how many attempts were made when there were several.
    pub(crate) fn into_error(self, attempts: u32) -> Error {
        let message =
            if attempts > 1 { format!("{} (gave up after {attempts} attempts)", self.message) } else { self.message };
        Error::new(self.kind, message).with_source(self.source)
    }
}

/// Classifies a client error. `what` says what the request was doing ("upserting 256 points into `docs`").
///
/// Every variant of [`QdrantError`] is named: a new variant in a client upgrade must be classified, not defaulted.
pub(crate) fn classify(e: QdrantError, site: Site<'_>, what: &str) -> Failure {
    let (kind, message, retry_after) = match &e {
        QdrantError::ResponseError { status } => from_status(status, site, what),
        QdrantError::ResourceExhaustedError { status, retry_after_seconds } => (
            ErrorKind::Transient,
            format!(
                "Qdrant at {} is overloaded while {what} ({}); it asked to retry after {retry_after_seconds} s",
                site.url,
                status.message()
            ),
            Some(Duration::from_secs(*retry_after_seconds)),
        ),
        QdrantError::ConversionError(why) => {
            (ErrorKind::Permanent, format!("the Qdrant client could not convert a value while {what}: {why}"), None)
        }
        QdrantError::InvalidUri(_) => (
            ErrorKind::InvalidInput,
            format!("the Qdrant URL `{}` is not valid (expected http://host:6334 or https://host:6334)", site.url),
            None,
        ),
        QdrantError::NoSnapshotFound(name) => {
            (ErrorKind::NotFound, format!("Qdrant at {} has no snapshot for `{name}`", site.url), None)
        }
        QdrantError::Io(io) => (ErrorKind::Unavailable, format!("cannot reach Qdrant at {}: {io}", site.url), None),
        QdrantError::JsonToPayload(_) => {
            (ErrorKind::InvalidInput, format!("a payload for Qdrant is not a JSON object while {what}"), None)
        }
        QdrantError::PayloadDeserialization(_) => {
            (ErrorKind::Corrupt, format!("a payload from Qdrant at {} cannot be read while {what}", site.url), None)
        }
    };
    let replica_down = matches!(&e, QdrantError::ResponseError { status } if is_replica_failure(status.message()));
    Failure { kind, message, retry_after, replica_down, source: e }
}

/// Classifies a gRPC status from the server or from the transport.
fn from_status(status: &tonic::Status, site: Site<'_>, what: &str) -> (ErrorKind, String, Option<Duration>) {
    let url = site.url;
    let msg = status.message();
    let port_hint = if url.contains(":6333") {
        " (6333 is Qdrant's REST port; ragtune talks gRPC, usually on port 6334)"
    } else {
        ""
    };
    let unreachable = || {
        // The transport's own text is a debug dump; say what it means when it is recognisable (the cause stays
        // attached as the error's source).
        let reason = if msg.contains("Connection refused") {
            "connection refused".to_owned()
        } else if msg.contains("dns error") || msg.contains("failed to lookup address") {
            "the host name does not resolve".to_owned()
        } else if msg.contains("timed out") || msg.contains("Elapsed") || msg.contains("deadline has elapsed") {
            format!("no connection within {:?}", site.connect_timeout)
        } else if msg.contains("certificate") || msg.contains("tls") || msg.contains("TLS") {
            format!("the TLS handshake failed ({msg})")
        } else {
            msg.to_owned()
        };
        (
            ErrorKind::Unavailable,
            format!(
                "cannot reach Qdrant at {url}: {reason} — is the server running, and is this its gRPC \
                 port?{port_hint} (while {what})"
            ),
            None,
        )
    };
    let timed_out = || {
        (
            ErrorKind::Transient,
            format!("Qdrant at {url} did not answer while {what}: timed out after {:?}", site.timeout),
            None,
        )
    };
    match status.code() {
        Code::Ok => (ErrorKind::Permanent, format!("Qdrant at {url} reported success as an error while {what}"), None),
        // tonic reports its own request timeout as `Cancelled` with "Timeout expired".
        Code::Cancelled if msg.contains("Timeout expired") => timed_out(),
        Code::Cancelled => {
            (ErrorKind::Transient, format!("a request to Qdrant at {url} was cancelled while {what}: {msg}"), None)
        }
        Code::DeadlineExceeded => timed_out(),
        // Checked before the connect failures: the message quotes the peer's connect error, but the server itself
        // answered.
        Code::Unavailable | Code::Unknown | Code::Internal if is_replica_failure(msg) => (
            ErrorKind::Transient,
            format!(
                "Qdrant at {url} could not reach a replica while {what} (a node of the cluster may be down): {}",
                msg.lines().next().unwrap_or(msg)
            ),
            None,
        ),
        Code::Unavailable | Code::Unknown | Code::Internal if is_connect_failure(status) => unreachable(),
        Code::Unavailable | Code::Unknown | Code::Aborted => {
            (ErrorKind::Transient, format!("Qdrant at {url} failed temporarily while {what}: {msg}{port_hint}"), None)
        }
        Code::ResourceExhausted => {
            (ErrorKind::Transient, format!("Qdrant at {url} is overloaded while {what}: {msg}"), None)
        }
        Code::InvalidArgument | Code::OutOfRange => {
            (ErrorKind::InvalidInput, format!("Qdrant at {url} refused {what}: {msg}"), None)
        }
        Code::NotFound => (ErrorKind::NotFound, format!("Qdrant at {url}: not found while {what}: {msg}"), None),
        Code::Unauthenticated | Code::PermissionDenied => (
            ErrorKind::Permanent,
            format!(
                "Qdrant at {url} refused {what} ({}): check the API key (QdrantConfig::api_key) and its permissions \
                 on this collection",
                msg
            ),
            None,
        ),
        Code::Unimplemented => (
            ErrorKind::Permanent,
            format!("Qdrant at {url} does not support {what} (the server is too old for this request): {msg}"),
            None,
        ),
        Code::DataLoss => (ErrorKind::Corrupt, format!("Qdrant at {url} lost data while {what}: {msg}"), None),
        Code::AlreadyExists | Code::FailedPrecondition | Code::Internal => {
            (ErrorKind::Permanent, format!("Qdrant at {url} failed {what}: {msg}{port_hint}"), None)
        }
    }
}

/// Whether the server says that a peer holding a replica failed the operation (`1 of 2 read operations failed`,
/// a peer's transport error relayed as a service error, or a shard left with no active replica for a moment while
/// the cluster marks a killed node's replicas dead), rather than failing itself.
fn is_replica_failure(msg: &str) -> bool {
    msg.contains("operations failed")
        || (msg.contains("Service internal error")
            && (msg.contains("Tonic status error") || msg.contains("does not have enough active replicas")))
}

/// Whether a status says the connection itself failed (refused, DNS, TLS handshake, connect timeout).
///
/// The client reports a failed (re)connect as `Internal` with "Failed to connect to …"; tonic reports a connect
/// error of a lazy channel as `Unavailable` with a `ConnectError` in the source chain.
fn is_connect_failure(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if e.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        source = e.source();
    }
    let msg = status.message();
    ["Failed to connect to", "tcp connect error", "error trying to connect", "dns error", "Connection refused"]
        .iter()
        .any(|needle| msg.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: Site<'static> = Site {
        url: "http://qdrant.test:6334",
        timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(5),
    };

    #[track_caller]
    fn check(e: QdrantError, kind: ErrorKind, message_has: &str) {
        let f = classify(e, SITE, "upserting 3 points into `docs`");
        assert_eq!(f.kind, kind, "{}", f.message);
        assert!(f.message.contains(message_has), "`{}` does not contain `{message_has}`", f.message);
    }

    fn status(code: Code, msg: &str) -> QdrantError {
        QdrantError::ResponseError { status: tonic::Status::new(code, msg) }
    }

    #[test]
    fn statuses_are_classified() {
        check(
            status(Code::Internal, "Failed to connect to http://qdrant.test:6334/: tcp connect error"),
            ErrorKind::Unavailable,
            "cannot reach Qdrant at http://qdrant.test:6334",
        );
        check(
            status(Code::Unavailable, "tcp connect error: Connection refused"),
            ErrorKind::Unavailable,
            "cannot reach Qdrant at http://qdrant.test:6334: connection refused",
        );
        check(
            status(Code::Internal, "Failed to connect to http://x/: ConnectError(\"dns error\")"),
            ErrorKind::Unavailable,
            "the host name does not resolve",
        );
        check(
            status(Code::Internal, "Failed to connect to http://x/: Transport(Elapsed(()))"),
            ErrorKind::Unavailable,
            "no connection within 5s",
        );
        check(status(Code::Unavailable, "connection reset"), ErrorKind::Transient, "failed temporarily");
        // Seen under load right after a node of a 3-node cluster was killed: a moment without an active replica.
        check(
            status(
                Code::Internal,
                "Service internal error: The replica set for shard 2 on peer 6006167266204875 does not have enough \
                 active replicas",
            ),
            ErrorKind::Transient,
            "could not reach a replica while",
        );
        check(status(Code::Cancelled, "Timeout expired"), ErrorKind::Transient, "timed out after 30s");
        check(status(Code::DeadlineExceeded, "deadline"), ErrorKind::Transient, "timed out after 30s");
        check(status(Code::Aborted, "conflict"), ErrorKind::Transient, "failed temporarily");
        check(status(Code::ResourceExhausted, "slow down"), ErrorKind::Transient, "overloaded");
        check(
            status(Code::NotFound, "Collection `docs` doesn't exist!"),
            ErrorKind::NotFound,
            "Collection `docs` doesn't exist!",
        );
        check(
            status(Code::InvalidArgument, "Wrong input: Vector dimension error"),
            ErrorKind::InvalidInput,
            "refused upserting 3 points into `docs`: Wrong input: Vector dimension error",
        );
        check(status(Code::Unauthenticated, "Invalid api-key"), ErrorKind::Permanent, "check the API key");
        check(status(Code::PermissionDenied, "read-only key"), ErrorKind::Permanent, "check the API key");
        check(status(Code::Unimplemented, "unknown method"), ErrorKind::Permanent, "too old");
        check(status(Code::DataLoss, "x"), ErrorKind::Corrupt, "lost data");
        check(status(Code::Internal, "Service internal error"), ErrorKind::Permanent, "failed upserting");
        check(QdrantError::ConversionError("x".into()), ErrorKind::Permanent, "could not convert");
    }

    #[test]
    fn rate_limits_carry_their_wait() {
        let e = QdrantError::ResourceExhaustedError {
            status: tonic::Status::resource_exhausted("x"),
            retry_after_seconds: 2,
        };
        let f = classify(e, SITE, "searching");
        assert_eq!(f.kind, ErrorKind::Transient);
        assert_eq!(f.retry_after, Some(Duration::from_secs(2)));
    }

    #[test]
    fn rest_port_gets_a_hint() {
        let site = Site {
            url: "http://localhost:6333",
            timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
        };
        let f = classify(status(Code::Unknown, "h2 protocol error"), site, "checking the server");
        assert!(f.message.contains("REST port"), "{}", f.message);
        let e = f.into_error(4);
        assert!(e.message().ends_with("(gave up after 4 attempts)"), "{}", e.message());
        assert_eq!(e.kind(), ErrorKind::Transient);
    }
}
