//! [`AppServer`]: an axum app served on `127.0.0.1` and a free port inside the test's own
//! runtime, for tests that need a real socket (an upstream for the proxy, a client IP, keep-alive)
//! rather than `oneshot`.
//!
//! The listener is bound before the value is returned, so the address is good at once; the app is
//! served with connection info (`ConnectInfo<SocketAddr>`), as the binaries serve theirs, so key
//! extractors that read the peer address work. Dropping the value stops the server;
//! [`AppServer::stop`] stops it gracefully and reports a server that failed.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long [`AppServer::stop`] waits for in-flight requests.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// An axum app on `127.0.0.1:PORT`, stopped on drop.
///
/// ```
/// use axum::Router;
/// use axum::routing::get;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use tollgate_testkit::AppServer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let server = AppServer::start(Router::new().route("/", get(|| async { "hello" }))).await;
/// let mut socket = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
/// socket
///     .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
///     .await
///     .unwrap();
/// let mut answer = String::new();
/// socket.read_to_string(&mut answer).await.unwrap();
/// assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello"));
/// server.stop().await;
/// # }
/// ```
#[derive(Debug)]
pub struct AppServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl AppServer {
    /// Binds a free loopback port and serves `app` on it in a task of the current runtime.
    /// Panics outside a tokio runtime or when no port can be bound.
    pub async fn start(app: Router) -> AppServer {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap_or_else(|err| panic!("cannot bind 127.0.0.1:0: {err}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|err| panic!("no local address: {err}"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        AppServer {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` followed by `path` (`"/v1/check"`, or `""`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish (up to 10 s) and panics if the server
    /// failed.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(STOP_TIMEOUT, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(err))) => panic!("the app server on {} failed: {err}", self.addr),
                Ok(Err(err)) => panic!("the app server task on {} failed: {err}", self.addr),
                Err(_) => panic!(
                    "the app server on {} did not stop within {STOP_TIMEOUT:?}",
                    self.addr
                ),
            }
        }
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        // Not graceful: a test that drops the server is done with it.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_the_server_frees_its_port() {
        let server = AppServer::start(Router::new()).await;
        let addr = server.addr();
        assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
        drop(server);
        // The aborted task drops the listener the next time the runtime polls it; bounded wait.
        let mut refused = false;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(refused, "{addr} still accepts connections after drop");
    }

    #[tokio::test]
    async fn stop_returns_once_the_server_has_stopped() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let server = AppServer::start(Router::new()).await;
        // A keep-alive connection that has had its answer, so the server surely holds it.
        let mut idle = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        idle.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0_u8; 1024];
        let n = idle.read(&mut answer).await.unwrap();
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 404"),
            "{:?}",
            String::from_utf8_lossy(&answer[..n])
        );
        // Returns only once the serving task has ended (it panics otherwise), and a graceful
        // stop closes idle connections. (Whether the port can be bound or connected to again is
        // no proof: other tests' sockets may take the freed port at once.)
        server.stop().await;
        let read = tokio::time::timeout(STOP_TIMEOUT, idle.read(&mut answer)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "the idle connection is still open: {read:?}"
        );
    }
}
