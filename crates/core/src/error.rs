use std::fmt;

/// What a caller can do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input was wrong; retrying the same input fails again.
    InvalidInput,
    /// Stored bytes do not follow the schema.
    Corrupt,
}

/// Errors of the pure codecs and validators. Messages follow OpenTSDB's wording where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidInput(String),
    #[error("{0}")]
    Corrupt(String),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::Corrupt(_) => ErrorKind::Corrupt,
        }
    }

    pub(crate) fn invalid(msg: impl fmt::Display) -> Self {
        Error::InvalidInput(msg.to_string())
    }

    pub(crate) fn corrupt(msg: impl fmt::Display) -> Self {
        Error::Corrupt(msg.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
