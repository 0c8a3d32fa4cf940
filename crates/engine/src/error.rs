use hourglass_core::uid::UidKind;

/// What a caller (a protocol handler) does with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input: the client must change the request (OpenTSDB's IllegalArgumentException).
    InvalidInput,
    /// A name or UID that does not exist (OpenTSDB's NoSuchUniqueName / NoSuchUniqueId).
    NotFound,
    /// Storage is unreachable or busy: retry later.
    Unavailable,
    /// Stored data is damaged or inconsistent.
    Corrupt,
    /// A query went past one of its limits (points, bytes, series, memory or time).
    LimitExceeded,
    /// An update that changes nothing (OpenTSDB answers 304 Not Modified).
    NotModified,
    /// The TSD is at a budget shared by every request (memory held by running queries):
    /// the same request may succeed later.
    Busy,
    /// Anything else.
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("No such name for '{kind}': '{name}'")]
    NoSuchName { kind: UidKind, name: String },
    #[error("No such unique ID for '{kind}': {uid}")]
    NoSuchId { kind: UidKind, uid: String },
    #[error("{0}")]
    InvalidInput(String),
    #[error("All Unique IDs for {kind} on {width} bytes are already assigned!")]
    UidsExhausted { kind: UidKind, width: u8 },
    #[error("{0}")]
    Corrupt(String),
    #[error(transparent)]
    Storage(#[from] hourglass_storage::Error),
    #[error("{0}")]
    Internal(String),
    #[error("{0}")]
    LimitExceeded(String),
    #[error("{0}")]
    NotModified(String),
    /// The write path cannot vouch for a write now (the log failed, or storage is down).
    #[error("{0}")]
    Unavailable(String),
    /// Buffered points are over their memory budget: the batch was refused, send it later.
    #[error("{0}")]
    Throttled(String),
    /// Running queries hold all the memory they may hold together: try again later.
    #[error("{0}")]
    Busy(String),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NoSuchName { .. } | Error::NoSuchId { .. } => ErrorKind::NotFound,
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::UidsExhausted { .. } | Error::Internal(_) => ErrorKind::Internal,
            Error::Corrupt(_) => ErrorKind::Corrupt,
            Error::LimitExceeded(_) => ErrorKind::LimitExceeded,
            Error::NotModified(_) => ErrorKind::NotModified,
            Error::Busy(_) => ErrorKind::Busy,
            Error::Unavailable(_) | Error::Throttled(_) => ErrorKind::Unavailable,
            Error::Storage(e) => match e.kind() {
                hourglass_storage::ErrorKind::Unavailable => ErrorKind::Unavailable,
                hourglass_storage::ErrorKind::Corrupt => ErrorKind::Corrupt,
                hourglass_storage::ErrorKind::InvalidInput => ErrorKind::InvalidInput,
                _ => ErrorKind::Internal,
            },
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }
}

impl From<hourglass_core::Error> for Error {
    fn from(e: hourglass_core::Error) -> Self {
        match e {
            hourglass_core::Error::InvalidInput(m) => Error::InvalidInput(m),
            hourglass_core::Error::Corrupt(m) => Error::Corrupt(m),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
