//! Where every librdkafka client idemguard makes begins: the producers (outbox relay, trace,
//! storm, demo), the consumer, the admin clients and the console's readers all start from
//! [`client_config`], so a connection property set once in `[kafka]` reaches every client.
//! Each caller adds only what its role needs (a group, acks, fetch sizes).

use rdkafka::ClientConfig;

use crate::config::KafkaConfig;

/// The settings every client shares: where the brokers are (and how to reach them).
pub fn client_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &kafka.bootstrap_servers);
    c
}
