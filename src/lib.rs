//! kforge: makes CUDA kernels faster with a Coder and a Judge LLM, real hardware feedback and a
//! Monte Carlo tree search over kernel variants. The binary (`src/main.rs`) is a thin shell over
//! these modules; each module's own doc says why it exists.

pub mod agents;
pub mod cli;
pub mod config;
pub mod doctor;
pub mod eval;
pub mod gpu;
pub mod llm;
pub mod logging;
pub mod ncu;
pub mod nvcc;
pub mod paths;
pub mod problem;
pub mod proc;
pub mod run;
pub mod search;
pub mod store;
pub mod tools;
pub mod worker;
