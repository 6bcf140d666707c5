//! The HTTP server loop: `axum::serve`'s, plus the connection timeouts it does not set.
//!
//! HTTP/1.1 only, served by hyper's own HTTP/1 connection. Browsers speak HTTP/2 only over
//! TLS, which a proxy in front ends; accepting HTTP/2 in clear text too meant sniffing each
//! connection's first bytes and reading them again, which doubled every connection's read
//! buffer to 16 KB: most of what an open live stream holds (`make bench`, streams).
//!
//! - **Header read** (hyper's `header_read_timeout`): a client must send a request's whole
//!   header in time, or the connection is closed. A slowloris client that sends a header a
//!   byte at a time holds a connection for this long at most. Hyper starts the clock again
//!   when a kept-alive connection waits for its next request.
//! - **Idle** ([`IdleTimeout`]): a connection on which no byte moves either way for this long
//!   is closed: an idle keep-alive connection, a client that stopped reading its response.
//!   A server that is still working on an answer is not idle (nothing is being read or
//!   written then, and nothing here is polled).
//! - **Request body**: see [`body_deadline`], a middleware, since bodies are read by handlers.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::http::failure::ApiFailure;
use app::error::{ApiError, ErrorCode};

/// The connection limits, from `server.*` in the configuration.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_read: Duration,
    pub idle: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, asks every
/// connection to finish its request and close, and returns when they have.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    let mut stop = stop_rx.clone();
    let mut open = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        let service = app.clone().map_request(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            req.map(Body::new)
        });
        let io = TokioIo::new(IdleTimeout::new(stream, limits.idle));
        let builder = builder.clone();
        let mut stop = stop_rx.clone();
        open.spawn(async move {
            let conn = builder
                .serve_connection(io, TowerToHyperService::new(service))
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => return log_end(peer, r),
                _ = stopped(&mut stop) => conn.as_mut().graceful_shutdown(),
            }
            log_end(peer, conn.await);
        });
        // Reap the finished ones so the set does not grow with every connection served.
        while open.try_join_next().is_some() {}
    }
    drop(listener);
    while open.join_next().await.is_some() {}
}

/// Resolves once `stop` says so (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return;
        }
    }
}

fn log_end(peer: SocketAddr, r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(%peer, error = %e, "connection closed");
    }
}

/// A stream that fails with `TimedOut` once no byte has moved either way for `limit` while
/// hyper waits on it.
pub struct IdleTimeout {
    inner: TcpStream,
    limit: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl IdleTimeout {
    pub fn new(inner: TcpStream, limit: Duration) -> IdleTimeout {
        IdleTimeout {
            inner,
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.limit);
    }

    /// Called when the stream is not ready: the error if the connection has been idle too
    /// long (the sleep also registers the waker, so an idle connection is woken to close).
    fn check(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for too long",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for IdleTimeout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending => this.check(cx).map(Err),
        }
    }
}

impl IdleTimeout {
    /// A write's result: progress moves the deadline on, a stall checks it.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(r) => {
                if matches!(r, Ok(n) if n > 0) {
                    self.moved();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.check(cx).map(Err),
        }
    }
}

impl AsyncWrite for IdleTimeout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A request's whole body must arrive within `limit` of its header; a body that trickles in
/// is refused with 408 instead of holding a connection and a task (a per-read timeout would
/// let a byte every few seconds through forever). Bodies here are small (`max_body`), so
/// the body is read into memory here and handed on whole; one over `max_body` is a 413.
pub async fn body_deadline(
    limit: Duration,
    max_body: usize,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let has_body = req.headers().contains_key(http::header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if !has_body {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(limit, axum::body::to_bytes(body, max_body)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(_)) => ApiFailure(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is over {max_body} bytes"),
        ))
        .into_response(),
        Err(_) => {
            tracing::info!(path = %parts.uri.path(), "request body too slow: refused");
            let mut res = ApiFailure(ApiError::new(
                ErrorCode::Timeout,
                format!(
                    "the request body did not arrive within {} s",
                    limit.as_secs_f64()
                ),
            ))
            .into_response();
            // The rest of the body may still be on its way: do not read it, close.
            res.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
            res
        }
    }
}
