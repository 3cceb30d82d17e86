//! What an attacker, a careless client or data other systems wrote cannot do: hostile strings
//! shown escaped in every face, secrets redacted and masked, every read bounded.
mod masking;
mod read_bounds;
mod redaction;
mod tls;
mod untrusted_input;
