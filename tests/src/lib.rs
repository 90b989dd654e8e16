//! Support for the integration tests in `it/`: the workload of the crash test, shared by the writer process that
//! gets killed (`src/bin/crash_writer.rs`) and the test that checks what it left behind (`it/crash.rs`).

pub mod crash;
