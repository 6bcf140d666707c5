//! Types shared by the browser, the server functions and the JSON API. `domain` holds the
//! plain values the server's lower layers may use; `views` what is shown on the wire.

pub mod domain;
pub mod views;

pub use domain::*;
pub use views::*;
