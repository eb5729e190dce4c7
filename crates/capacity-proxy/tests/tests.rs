//! Integration tests of capacity-proxy through aws-sdk-dynamodb: sink mode in process,
//! forward mode in front of a private moto started with the `stand-in` crate.

mod common;
mod faults;
mod forward;
mod reads;
mod sink;
mod transactions;
mod writes;
