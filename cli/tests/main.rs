//! The command-line tool's tests: every file beside this one is a module of
//! this one test binary (`cargo test -p flume-cli --test cli`; one file:
//! `cargo test -p flume-cli --test cli crash::`), with the shared helpers in
//! `common/`.

mod common;

mod acls;
mod admin;
mod cli;
mod config;
mod consumer_protocol;
mod crash;
mod data;
mod data_dir;
mod group_join;
mod groups;
mod layers;
mod messages;
mod produce_consume;
mod share;
mod tls;
mod users;
