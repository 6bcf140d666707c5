//! A person's sign-in through an OpenID provider, as it is recorded.

use app::model::domain::Membership;
use chrono::{DateTime, Utc};

/// A sign-in through an OpenID provider, as `Db::sign_in_identity` records it.
pub struct IdentitySignIn<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    pub wanted_user_id: &'a str,
    pub display_name: &'a str,
    pub email: Option<&'a str>,
    pub is_admin: bool,
    pub teams: &'a [Membership],
    pub groups: &'a [String],
    pub at: DateTime<Utc>,
}
