//! Personal API tokens: made from 32 random bytes, kept only as a SHA-256.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Personal API tokens start with this, so they are easy to recognise (and to scan for).
pub const TOKEN_PREFIX: &str = "gantry_";

/// A new token and its hash. 32 random bytes from the OS: 256 bits, so a fast hash is the
/// right store (there is nothing to brute-force, unlike a password).
pub fn new_token() -> (String, String) {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let hash = token_hash(&token);
    (token, hash)
}

/// A webhook's signing secret: 32 random bytes from the OS, `whsec_` + URL-safe base64.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_prefixed_and_hashed() {
        let (a, ha) = new_token();
        let (b, hb) = new_token();
        assert_ne!(a, b);
        assert!(
            a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 43,
            "{a}"
        );
        assert_eq!(ha, token_hash(&a));
        assert_ne!(ha, hb);
        assert_eq!(ha.len(), 64);
        assert!(!ha.contains(&a[TOKEN_PREFIX.len()..]));
    }
}
