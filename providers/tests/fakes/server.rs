//! How the fakes serve: on 127.0.0.1 with a random port, each handler run in a task of its own
//! (cancelled when the client hangs up) whose panic is recorded ([`Panics`]: the test checks it, so a fake that panics fails the
//! test instead of looking to the client like a dropped connection), and a connection a
//! handler asks to drop ([`DROP_CONNECTION`]) closed without its answer: the channel took the
//! request and acted on it, and the answer never came back (what makes a send ambiguous).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A response header a handler sets to have its connection closed instead of answered.
pub const DROP_CONNECTION: &str = "x-fake-drop-connection";

/// A fake API served as [`serve`] does: its address, the panics of its handlers, and its
/// state `S`. Each fake adds its own methods to `Served<its state>`.
pub struct Served<S> {
    pub addr: SocketAddr,
    panics: Panics,
    state: Arc<Mutex<S>>,
    name: &'static str,
}

impl<S> Clone for Served<S> {
    fn clone(&self) -> Self {
        Self {
            addr: self.addr,
            panics: self.panics.clone(),
            state: self.state.clone(),
            name: self.name,
        }
    }
}

impl<S: Send + 'static> Served<S> {
    /// Serves `router` (its handlers share `state`) as the fake `name` (`Twilio`).
    pub async fn serve_state(
        name: &'static str,
        state: S,
        router: axum::Router<Arc<Mutex<S>>>,
    ) -> Self {
        let state = Arc::new(Mutex::new(state));
        let (addr, panics) = serve(router.with_state(state.clone())).await;
        Self {
            addr,
            panics,
            state,
            name,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The fake's state.
    pub fn s(&self) -> std::sync::MutexGuard<'_, S> {
        let name = self.name;
        self.state
            .lock()
            .unwrap_or_else(|_| panic!("fake {name} lock"))
    }

    /// Fails the test if a handler of the fake panicked.
    pub fn check(&self) {
        self.panics.check(self.name);
    }
}

/// The panics of a fake's handlers (and a server that stopped), in order.
#[derive(Clone, Default)]
pub struct Panics(Arc<Mutex<Vec<String>>>);

impl Panics {
    fn record(&self, what: String) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(what);
    }

    /// What was recorded.
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Fails the test if a handler of the fake `what` panicked.
    pub fn check(&self, what: &str) {
        let all = self.all();
        assert!(
            all.is_empty(),
            "the fake {what} failed:\n{}",
            all.join("\n")
        );
    }
}

/// A connection's switch: once on, nothing more is written to it.
#[derive(Clone, Debug)]
struct Conn {
    dropped: Arc<AtomicBool>,
}

impl Connected<IncomingStream<'_, Dropping>> for Conn {
    fn connect_info(stream: IncomingStream<'_, Dropping>) -> Self {
        stream.remote_addr().clone()
    }
}

/// A TCP listener whose connections can be dropped by their handler.
struct Dropping(TcpListener);

impl Listener for Dropping {
    type Io = DroppableStream;
    type Addr = Conn;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, _)) => {
                    let dropped = Arc::new(AtomicBool::new(false));
                    let conn = Conn {
                        dropped: dropped.clone(),
                    };
                    return (DroppableStream { stream, dropped }, conn);
                }
                // Out of file descriptors and the like: try again, as axum's own listener does.
                Err(_) => tokio::task::yield_now().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(Conn {
            dropped: Arc::new(AtomicBool::new(false)),
        })
    }
}

/// A TCP stream that refuses every write once its connection is dropped: the server then
/// closes it without a byte of the answer.
struct DroppableStream {
    stream: TcpStream,
    dropped: Arc<AtomicBool>,
}

impl DroppableStream {
    fn refused(&self) -> Option<io::Error> {
        self.dropped
            .load(Ordering::SeqCst)
            .then(|| io::Error::from(io::ErrorKind::ConnectionReset))
    }
}

impl AsyncRead for DroppableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for DroppableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.refused() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.refused() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Aborts a handler's task when the request's future is dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the handler in a task of its own (cancelled when its client hangs up): a panic is recorded and answered 500; an answer
/// carrying [`DROP_CONNECTION`] drops its connection instead.
async fn guard(
    State(panics): State<Panics>,
    ConnectInfo(conn): ConnectInfo<Conn>,
    request: Request,
    next: Next,
) -> Response {
    let what = format!("{} {}", request.method(), request.uri().path());
    let task = tokio::spawn(next.run(request));
    // A client that hangs up drops this future: its handler stops too (a long poll of a
    // killed process no longer waits at the fake).
    let _cancel = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(response) => {
            if response.headers().contains_key(DROP_CONNECTION) {
                conn.dropped.store(true, Ordering::SeqCst);
            }
            response
        }
        Err(e) => {
            let why = match e.try_into_panic() {
                Ok(payload) => payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic".to_owned()),
                Err(e) => e.to_string(),
            };
            panics.record(format!("handler of {what} panicked: {why}"));
            (StatusCode::INTERNAL_SERVER_ERROR, "the fake panicked").into_response()
        }
    }
}

/// Binds 127.0.0.1:0 and serves `router` (see the module docs).
pub async fn serve(router: axum::Router) -> (SocketAddr, Panics) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let addr = listener.local_addr().expect("local addr");
    let panics = Panics::default();
    let app = router
        .layer(axum::middleware::from_fn_with_state(panics.clone(), guard))
        .into_make_service_with_connect_info::<Conn>();
    let recorded = panics.clone();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(Dropping(listener), app).await {
            recorded.record(format!("the server stopped: {e}"));
        }
    });
    (addr, panics)
}

/// `answer`, marked to drop its connection instead when `drops` (the fake's count of answers
/// still to drop) is not zero, which it decrements.
pub fn answer_or_drop(drops: &mut usize, mut answer: Response) -> Response {
    if *drops > 0 {
        *drops -= 1;
        answer
            .headers_mut()
            .insert(DROP_CONNECTION, axum::http::HeaderValue::from_static("1"));
    }
    answer
}
