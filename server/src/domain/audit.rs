//! The audit log's entries (who, when, what, before → after, from where) and its filter.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// One audit log entry.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AuditEntry {
    pub id: String,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub address: Option<String>,
}

impl AuditEntry {
    pub fn new(actor: &str, action: &str, target: &str, at: DateTime<Utc>) -> Self {
        AuditEntry {
            id: uuid::Uuid::now_v7().to_string(),
            at,
            actor: actor.to_string(),
            action: action.to_string(),
            target: target.to_string(),
            before: None,
            after: None,
            address: None,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    /// Entries whose target starts with this.
    pub target: Option<String>,
    /// Keyset: only entries after this one in the order (time, id), both descending.
    pub after: Option<(chrono::DateTime<chrono::Utc>, String)>,
    pub limit: i64,
}
