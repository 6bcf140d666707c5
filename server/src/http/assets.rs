//! The site's files under `/pkg` (wasm, JS, CSS), compressed once and kept in memory.
//!
//! Their names carry a content hash (`hash-files`), so a name always means the same bytes:
//! the brotli or gzip copy made for the first client that asks is right for every later
//! one. Compressing on every request, as the compression layer does for pages, cost seconds
//! per page load for the debug build's 11 MB wasm on a busy machine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::{header, HeaderValue, Method};
use leptos::config::LeptosOptions;
use tokio::io::AsyncWriteExt;

/// Compressed copies of the `/pkg` files, by path and encoding.
#[derive(Default)]
pub struct AssetCache(Mutex<HashMap<(String, Encoding), Bytes>>);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    Brotli,
    Gzip,
}

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Encoding::Brotli => "br",
            Encoding::Gzip => "gzip",
        }
    }

    /// The best of ours the client accepts (`Accept-Encoding`, a `q=0` refuses one).
    pub fn accepted(headers: &http::HeaderMap) -> Option<Encoding> {
        let accepts = |name: &str| {
            headers
                .get_all(header::ACCEPT_ENCODING)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|item| {
                    let mut parts = item.split(';');
                    let coding = parts.next().unwrap_or("").trim();
                    let refused = parts.any(|p| {
                        p.trim()
                            .strip_prefix("q=")
                            .and_then(|q| q.trim().parse::<f32>().ok())
                            .is_some_and(|q| q <= 0.0)
                    });
                    coding.eq_ignore_ascii_case(name) && !refused
                })
        };
        if accepts("br") {
            Some(Encoding::Brotli)
        } else if accepts("gzip") {
            Some(Encoding::Gzip)
        } else {
            None
        }
    }

    async fn compress(self, raw: &[u8]) -> std::io::Result<Bytes> {
        use async_compression::tokio::write::{BrotliEncoder, GzipEncoder};
        let out = match self {
            Encoding::Brotli => {
                // Quality 5: near the best size at a fraction of quality 11's time (the
                // first request for a file waits for it).
                let mut e =
                    BrotliEncoder::with_quality(Vec::new(), async_compression::Level::Precise(5));
                e.write_all(raw).await?;
                e.shutdown().await?;
                e.into_inner()
            }
            Encoding::Gzip => {
                let mut e = GzipEncoder::new(Vec::new());
                e.write_all(raw).await?;
                e.shutdown().await?;
                e.into_inner()
            }
        };
        Ok(Bytes::from(out))
    }
}

impl AssetCache {
    /// Compresses every file in the site's `pkg` directory ahead of the first request, so no
    /// first page load waits for it (about a second for the debug wasm).
    pub async fn warm(&self, site_root: &str, pkg_dir: &str) {
        let dir = std::path::Path::new(site_root).join(pkg_dir);
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            return;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().to_string();
            if !(name.ends_with(".wasm") || name.ends_with(".js") || name.ends_with(".css")) {
                continue;
            }
            let Ok(raw) = tokio::fs::read(entry.path()).await else {
                continue;
            };
            for encoding in [Encoding::Brotli, Encoding::Gzip] {
                if let Ok(c) = encoding.compress(&raw).await {
                    self.0
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((format!("/{pkg_dir}/{name}"), encoding), c);
                }
            }
        }
    }
}

/// Answers a `GET /pkg/…` from the cache when the client accepts brotli or gzip; the first
/// time, serves the file as the router does and keeps its compressed copy. Anything else
/// (another path, a conditional request, an error) goes on unchanged.
pub async fn compressed_pkg(cache: Arc<AssetCache>, req: Request, next: Next) -> Response {
    let conditional = req.headers().contains_key(header::IF_NONE_MATCH)
        || req.headers().contains_key(header::IF_MODIFIED_SINCE)
        || req.headers().contains_key(header::RANGE);
    let encoding = Encoding::accepted(req.headers());
    let path = req.uri().path().to_string();
    let (Some(encoding), true, false) = (
        encoding,
        req.method() == Method::GET && path.starts_with("/pkg/"),
        conditional,
    ) else {
        return next.run(req).await;
    };
    let key = (path, encoding);
    let cached = cache
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    let res = next.run(req).await;
    if !res.status().is_success() || res.headers().contains_key(header::CONTENT_ENCODING) {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let compressed = match cached {
        Some(c) => c,
        None => {
            let Ok(raw) = axum::body::to_bytes(body, 256 << 20).await else {
                return Response::from_parts(parts, Body::empty());
            };
            match encoding.compress(&raw).await {
                Ok(c) => {
                    cache
                        .0
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, c.clone());
                    c
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not compress a site file; sent as it is");
                    return Response::from_parts(parts, Body::from(raw));
                }
            }
        }
    };
    parts.headers.insert(
        header::CONTENT_ENCODING,
        HeaderValue::from_static(encoding.name()),
    );
    parts
        .headers
        .insert(header::CONTENT_LENGTH, compressed.len().into());
    parts
        .headers
        .insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    parts.headers.remove(header::ACCEPT_RANGES);
    Response::from_parts(parts, Body::from(compressed))
}

/// The site's stylesheet under its hashed name, as Leptos' `HashedStylesheet` links it, for
/// the few pages rendered without Leptos (a failed single sign-on).
pub fn stylesheet_href(options: &LeptosOptions) -> String {
    let hash = options
        .hash_files
        .then(|| std::fs::read_to_string(&*options.hash_file).ok())
        .flatten()
        .and_then(|text| {
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == "css")
                .map(|(_, h)| format!(".{}", h.trim()))
        })
        .unwrap_or_default();
    format!(
        "/{}/{}{hash}.css",
        options.site_pkg_dir, options.output_name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_is_read_with_its_weights() {
        let h = |v: &str| {
            let mut m = http::HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            Encoding::accepted(&m)
        };
        assert_eq!(h("gzip, deflate, br, zstd"), Some(Encoding::Brotli));
        assert_eq!(h("gzip"), Some(Encoding::Gzip));
        assert_eq!(h("BR;q=0.5, gzip"), Some(Encoding::Brotli));
        assert_eq!(h("br;q=0, gzip;q=1"), Some(Encoding::Gzip));
        assert_eq!(h("identity"), None);
        assert_eq!(h("brotli"), None);
        assert_eq!(Encoding::accepted(&http::HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn both_encodings_give_back_the_bytes() {
        use tokio::io::AsyncReadExt;
        let raw: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let br = Encoding::Brotli.compress(&raw).await.unwrap();
        let gz = Encoding::Gzip.compress(&raw).await.unwrap();
        assert!(br.len() < raw.len() / 4 && gz.len() < raw.len() / 4);
        let mut back = Vec::new();
        async_compression::tokio::bufread::BrotliDecoder::new(&br[..])
            .read_to_end(&mut back)
            .await
            .unwrap();
        assert_eq!(back, raw);
        back.clear();
        async_compression::tokio::bufread::GzipDecoder::new(&gz[..])
            .read_to_end(&mut back)
            .await
            .unwrap();
        assert_eq!(back, raw);
    }
}
