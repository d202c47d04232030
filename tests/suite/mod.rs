//! The integration suites, one file per concern.
mod abi;
mod agent;
mod architecture;
mod cli;
mod common;
mod compile;
mod gpu;
mod mock_model;
mod pytorch;
mod report;
mod sandbox;
mod session;
mod slurm;
