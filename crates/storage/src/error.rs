/// What a caller can do about a storage error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong (bad regex, bad counter); retrying fails again.
    InvalidInput,
    /// The table or family does not exist.
    NotFound,
    /// The store cannot be reached or is busy; retry later.
    Unavailable,
    /// Stored bytes are damaged.
    Corrupt,
    /// A bug or an unexpected I/O failure.
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("table not found. table={0}")]
    TableNotFound(String),
    #[error("column family not found. table={table} family={family}")]
    FamilyNotFound { table: String, family: String },
    #[error("invalid row key regex: {0}")]
    InvalidRegex(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    #[error("storage error: {0}")]
    Internal(String),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::TableNotFound(_) | Error::FamilyNotFound { .. } => ErrorKind::NotFound,
            Error::InvalidRegex(_) | Error::InvalidRequest(_) => ErrorKind::InvalidInput,
            Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::Corrupt(_) => ErrorKind::Corrupt,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
