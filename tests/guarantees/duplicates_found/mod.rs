//! A duplicate that got through is found and named: the storms' invariants checked from the
//! database, the alert rules on real metrics, the demo's incidents.
mod alerting;
mod demo;
mod storm;
