//! Rebuilds when the kernel ABI header changes, so the compiled-in path to
//! `cutlass-templates/include` and the committed bindings stay in step with it. The
//! bindings themselves are committed (see tests/suite/abi.rs), so building cutesmith
//! needs no libclang.

fn main() {
    println!("cargo:rerun-if-changed=cutlass-templates/include/cutesmith_abi.h");
    println!("cargo:rerun-if-changed=build.rs");
}
