//! The ceiling of the gRPC stack for the Envoy rate limit service: a tonic server (the default
//! `tonic::transport::Server`, `TCP_NODELAY` on) that decodes every `ShouldRateLimit` request
//! and answers `OK` with one `OK` status per descriptor, deciding nothing. The answer has the
//! shape of a real one, so what `tollgate serve` and limitador spend beyond this server is
//! their deciding, counting and bookkeeping. `scripts/versus-limitador.sh` measures it.
//!
//! ```text
//! bare_rls ADDR
//! ```
//!
//! serves on `ADDR` (such as `127.0.0.1:8081`) until killed, after printing
//! `bare rls listening on ADDR`.
//!
//! It allocates with mimalloc, as the `tollgate` binary does, so the ceiling is the same stack
//! on the same allocator.

use std::net::SocketAddr;

use tollgate_server::grpc::proto::rate_limit_response::{Code, DescriptorStatus};
use tollgate_server::grpc::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use tollgate_server::grpc::proto::{RateLimitRequest, RateLimitResponse};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Bare;

#[tonic::async_trait]
impl RateLimitService for Bare {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let statuses = request
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok.into(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok.into(),
            statuses,
            ..Default::default()
        }))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench` to every bench target: serve nothing then.
    if args.is_empty() || args.iter().any(|a| a == "--bench") {
        eprintln!("usage: bare_rls ADDR");
        return;
    }
    let addr: SocketAddr = args[0].parse().unwrap_or_else(|err| {
        panic!(
            "ADDR: expected an address like 127.0.0.1:8081, got {:?}: {err}",
            args[0]
        )
    });
    // The same runtime as `tollgate serve`: one thread on one core, else one worker per core.
    let runtime = tollgate_server::server_runtime().expect("runtime");
    runtime.block_on(async {
        let incoming = TcpIncoming::bind(addr)
            .unwrap_or_else(|err| panic!("cannot listen on {addr}: {err}"))
            .with_nodelay(Some(true));
        println!("bare rls listening on {addr}");
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Bare))
            .serve_with_incoming(incoming)
            .await
            .expect("serve");
    });
}
