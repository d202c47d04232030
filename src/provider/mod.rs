//! Where kernels come from. Today: the built-in provider, which instantiates CuTe
//! templates from strategies, compiles them in parallel and keeps the fastest correct
//! one. The model-backed providers of the agent loop join here.

pub mod builtin;
