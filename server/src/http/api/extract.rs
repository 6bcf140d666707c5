//! Extractors of the JSON API: bodies read strictly (400 for malformed JSON, 422 naming the
//! field), query strings and path segments with the same error shape, definition texts.

use super::*;

pub(super) type ApiResult<T> = Result<T, ApiFailure>;

/// A JSON body read strictly: malformed JSON is a 400; a value of the wrong type, a missing,
/// unknown or repeated field (at any depth) or a control character a 422 naming the field; a
/// body over the limit a 413.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiFailure;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !media_type_is(&req, &["application/json"]) {
            return Err(ApiFailure(ApiError::bad_request(
                "send the body as JSON with Content-Type: application/json",
            )));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiFailure(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the request body is too large",
                ))
            } else {
                ApiFailure(ApiError::bad_request("the request body could not be read"))
            }
        })?;
        read_json(&bytes).map(ApiJson)
    }
}

/// Whether the request's media type is one of `types`: case-insensitive, parameters allowed
/// (`application/json; charset=utf-8`), and nothing else (`application/jsonx` is not JSON).
pub(super) fn media_type_is(req: &Request, types: &[&str]) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| types.iter().any(|x| t.trim().eq_ignore_ascii_case(x)))
}

/// A JSON body as `T`: first one pass that refuses a key given twice and control
/// characters, and nothing may follow the value; then `T` itself. Malformed JSON is a 400,
/// anything else a 422 naming the field by its path (`params.lr`, `changes[0].team`).
pub(super) fn read_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiFailure> {
    use serde_json::error::Category;
    let malformed =
        |e: &serde_json::Error| ApiFailure(ApiError::bad_request(format!("malformed JSON: {e}")));
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    if let Err(e) = serde_path_to_error::deserialize::<_, crate::input::CheckedJson>(&mut *de) {
        let path = e.path().to_string();
        let inner = e.into_inner();
        return Err(match inner.classify() {
            Category::Data => ApiFailure(field_error(&path, &inner.to_string())),
            _ => malformed(&inner),
        });
    }
    // Nothing may follow the value (`{…}this is not JSON` was once taken).
    de.end().map_err(|e| malformed(&e))?;
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            Category::Data => ApiFailure(field_error(&path, &inner.to_string())),
            _ => malformed(&inner),
        }
    })
}

/// The text between `prefix` at the start of `msg` and the next backtick.
pub(super) fn quoted_after<'a>(msg: &'a str, prefix: &str) -> Option<&'a str> {
    msg.strip_prefix(prefix)?.split('`').next()
}

/// A value that was read but not accepted, as a 422 naming the field: serde's message (`unknown
/// field`, `missing field`, `duplicate field`, a wrong type) and the path where it failed.
pub(super) fn field_error(path: &str, msg: &str) -> ApiError {
    let msg = msg.split(" at line ").next().unwrap_or(msg);
    let at_root = path.is_empty() || path == ".";
    let key = [
        "unknown field `",
        "missing field `",
        "duplicate field `",
        crate::input::DUPLICATE_KEY,
        crate::input::CONTROL_IN_KEY,
    ]
    .iter()
    .find_map(|p| quoted_after(msg, p));
    let field = match key {
        // The key is named in the message; the path is the object it is in (or, for some
        // errors, already ends with the key).
        Some(k) if at_root || path == k || path.ends_with(&format!(".{k}")) => {
            if at_root {
                k.to_string()
            } else {
                path.to_string()
            }
        }
        Some(k) => format!("{path}.{k}"),
        None if at_root => String::new(),
        None => path.to_string(),
    };
    let err = ApiError::new(ErrorCode::Invalid, msg);
    if field.is_empty() {
        err
    } else {
        err.with_field(field)
    }
}

/// A query string read strictly, with every rejection in the API's JSON error shape: an
/// unknown, repeated or ill-typed parameter, or a control character, is a 422 naming it.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default().as_bytes();
        let mut seen = std::collections::HashSet::new();
        for (k, v) in form_urlencoded::parse(query) {
            let name = k.escape_debug().to_string();
            crate::input::single_line(&name, &k)?;
            crate::input::single_line(&name, &v)?;
            if !seen.insert(k) {
                return Err(ApiError::invalid(name, "given more than once").into());
            }
        }
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query));
        serde_path_to_error::deserialize(de)
            .map(ApiQuery)
            .map_err(|e| ApiFailure(field_error(&e.path().to_string(), &e.inner().to_string())))
    }
}

/// Path segments (ids, names) in the API's JSON error shape: a control character or bytes
/// that are not UTF-8 are a 422 naming the segment.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiFailure;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rej| {
                let text = rej.body_text();
                let field = text
                    .split_once('`')
                    .and_then(|(_, rest)| rest.split('`').next())
                    .unwrap_or("path")
                    .to_string();
                ApiFailure(ApiError::invalid(field, text))
            })?;
        for (name, value) in &raw {
            crate::input::single_line(name, value)?;
        }
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| ApiPath(t))
            .map_err(|rej| ApiFailure(ApiError::invalid("path", rej.body_text())))
    }
}

/// A template definition as text: YAML (or JSON, which YAML reads too).
pub struct DefinitionText(pub String);

impl<S: Send + Sync> FromRequest<S> for DefinitionText {
    type Rejection = ApiFailure;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let accepted = media_type_is(
            &req,
            &[
                "application/yaml",
                "application/x-yaml",
                "text/yaml",
                "application/json",
                "text/plain",
            ],
        );
        if !accepted {
            return Err(ApiFailure(ApiError::bad_request(
                "send the template definition as YAML (Content-Type: application/yaml) or JSON",
            )));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiFailure(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "the definition is too large",
                ))
            } else {
                ApiFailure(ApiError::bad_request("the request body could not be read"))
            }
        })?;
        String::from_utf8(bytes.to_vec())
            .map(DefinitionText)
            .map_err(|_| ApiFailure(ApiError::bad_request("the definition must be UTF-8 text")))
    }
}
