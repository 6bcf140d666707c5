//! The services' own error: what went wrong, in the operation's terms, with the field at fault
//! for bad input. The HTTP edge and the server functions turn it into the wire error
//! (`ApiError`, with its status) here, in one place; an internal failure is logged with the
//! request id and shows only that id.

use app::error::{ApiError, ErrorCode};

use crate::cluster::ClusterError;
use crate::context::current_request_id;
use crate::db::DbError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    NotFound,
    /// Signed in, but not allowed to do this.
    Forbidden,
    /// Not signed in, or the credential no longer holds.
    Unauthorized,
    /// A value is not accepted (`field` names it).
    Invalid,
    /// The state does not allow it (already ended, a stale version, taken).
    Conflict,
    /// Something broke on our side; the message carries only the request id.
    Internal,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    pub field: Option<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            field: None,
        }
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, what)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Kind::Forbidden, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(Kind::Unauthorized, message)
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Kind::Invalid, message).with_field(field)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, message)
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        ApiError::from(self.clone()).status()
    }
}

/// An internal failure: logged with the request id, shown as that id only.
pub fn internal(e: impl std::fmt::Display) -> Error {
    let id = current_request_id();
    tracing::error!(request_id = %id, error = %e, "internal error");
    Error::new(
        Kind::Internal,
        format!("something went wrong on our side (request id {id})"),
    )
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let code = match e.kind {
            Kind::NotFound => ErrorCode::NotFound,
            Kind::Forbidden => ErrorCode::Forbidden,
            Kind::Unauthorized => ErrorCode::Unauthorized,
            Kind::Invalid => ErrorCode::Invalid,
            Kind::Conflict => ErrorCode::Conflict,
            Kind::Internal => ErrorCode::Internal,
        };
        ApiError {
            code,
            message: e.message,
            field: e.field,
        }
    }
}

impl From<DbError> for Error {
    fn from(e: DbError) -> Self {
        match e {
            DbError::NotFound => Error::not_found("not found"),
            DbError::Conflict => Error::conflict("that already exists"),
            other => internal(other),
        }
    }
}

impl From<ClusterError> for Error {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Conflict(m) => Error::conflict(format!(
                "the cluster kept a value someone else set, nothing was changed: {m}"
            )),
            other => internal(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_answered_with_its_status_and_keeps_its_field() {
        let cases = [
            (Error::not_found("no job"), 404),
            (Error::forbidden("not yours").with_field("team"), 403),
            (Error::unauthorized("sign in first"), 401),
            (Error::invalid("gpus", "must be 8, 16 or 32"), 422),
            (Error::conflict("already ended"), 409),
            (internal("disk on fire"), 500),
        ];
        for (e, status) in cases {
            let wire = ApiError::from(e.clone());
            assert_eq!((e.status(), wire.status()), (status, status), "{e:?}");
            assert_eq!(wire.message, e.message);
            assert_eq!(wire.field, e.field);
        }
        assert!(!internal("disk on fire").message.contains("disk"));
    }
}
