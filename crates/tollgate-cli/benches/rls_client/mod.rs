//! The gRPC client the benches drive `ShouldRateLimit` with: just enough HTTP/2 (the `h2`
//! crate) to send a length-prefixed `RateLimitRequest`, read the answer, check `grpc-status`
//! and decode the `RateLimitResponse`. A general-purpose client (tonic) costs several times
//! more per call, and the generator shares the machine with the server it measures, so every
//! cycle it saves is one the server can use.

use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use prost::Message;
use tokio::net::TcpStream;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};

/// The path of the call.
pub(crate) const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The request for one descriptor of one entry, as a gRPC message: a 5-byte prefix (not
/// compressed, length) and the protobuf.
pub(crate) fn message(domain: &str, key: &str, value: String) -> Bytes {
    let request = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_owned(),
                value,
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    let len = request.encoded_len();
    let mut out = BytesMut::with_capacity(5 + len);
    out.put_u8(0);
    out.put_u32(u32::try_from(len).expect("small message"));
    request.encode(&mut out).expect("encode");
    out.freeze()
}

/// One HTTP/2 connection to `addr` with `streams` concurrent streams, each making `requests`
/// calls one after the other; `body(stream, i)` is the message of a stream's `i`th call. Returns
/// the latencies in microseconds and how many answers were `OK` (the others were `OVER_LIMIT`).
pub(crate) async fn connection<F>(
    addr: &str,
    streams: usize,
    requests: usize,
    body: F,
) -> (Histogram<u64>, usize)
where
    F: Fn(usize, usize) -> Bytes + Clone + Send + 'static,
{
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let (send, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let uri: http::Uri = format!("http://{addr}{SHOULD_RATE_LIMIT}").parse().expect("uri");
    let tasks: Vec<_> = (0..streams)
        .map(|s| {
            let send = send.clone();
            let uri = uri.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let mut latencies = Histogram::<u64>::new(3).expect("histogram");
                let mut ok = 0;
                for i in 0..requests {
                    let message = body(s, i);
                    let started = Instant::now();
                    ok += usize::from(call(&send, &uri, message).await == Code::Ok);
                    latencies
                        .record(started.elapsed().as_micros() as u64)
                        .expect("record");
                }
                (latencies, ok)
            })
        })
        .collect();
    drop(send);
    let mut all = Histogram::<u64>::new(3).expect("histogram");
    let mut ok = 0;
    for task in tasks {
        let (latencies, some) = task.await.expect("stream task");
        all.add(latencies).expect("merge");
        ok += some;
    }
    driver.abort();
    (all, ok)
}

/// One unary call: the request with its message, then the answer's message and trailers.
/// Returns the answer's overall code; panics unless the call succeeded (`grpc-status` 0) with
/// `OK` or `OVER_LIMIT`.
async fn call(send: &h2::client::SendRequest<Bytes>, uri: &http::Uri, body: Bytes) -> Code {
    let request = http::Request::post(uri.clone())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let mut ready = send.clone().ready().await.expect("ready");
    let (response, mut stream) = ready.send_request(request, false).expect("send request");
    stream.send_data(body, true).expect("send data");
    let response = response.await.expect("response");
    assert_eq!(response.status(), http::StatusCode::OK);
    let mut body = response.into_body();
    let mut message = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("data");
        let _ = body.flow_control().release_capacity(chunk.len());
        message.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.expect("trailers").unwrap_or_default();
    let status = trailers.get("grpc-status").map(|v| v.as_bytes().to_vec());
    assert_eq!(status.as_deref(), Some(&b"0"[..]), "grpc-status");
    let mut message = message.freeze();
    assert!(message.len() >= 5, "a gRPC message");
    message.advance(5);
    let answer = RateLimitResponse::decode(message).expect("decode");
    match answer.overall_code() {
        code @ (Code::Ok | Code::OverLimit) => code,
        Code::Unknown => panic!("no overall code: {answer:?}"),
    }
}
