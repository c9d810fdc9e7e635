//! Generates the tonic/prost code from `proto/` with protox, a pure-Rust
//! protobuf compiler, so building Berth never needs a system `protoc`.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/berth/v1/api.proto",
    "proto/berth/agent/v1/agent.proto",
    "proto/berth/raft/v1/raft.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .out_dir(out_dir)
        .compile_fds(descriptors)?;
    Ok(())
}
