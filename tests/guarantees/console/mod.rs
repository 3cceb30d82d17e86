//! The operations console: an operator action changes only what the operator saw, and is
//! audited; each view shows where a duplicate was stopped; the terminal, the report and the
//! headless twins hold under faults.
mod actions;
mod contexts;
mod faults;
pub(crate) mod fixture;
mod hygiene;
mod live;
mod logs_and_cancel;
mod open_and_narrow;
mod operator_details;
mod redrive;
mod report_html;
mod trace_logs;
mod trace_scale;
mod views;
