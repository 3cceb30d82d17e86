package dev.idemguard.peers;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A team's payment service publishing payment events with the Java client, as idemguard meets
 * it in the wild: key = orderNo placed by the client's default partitioner (murmur2 of the key,
 * what idemguard calls {@code murmur2_random}), headers eventId / requestId / orderNo, an
 * idempotent producer, gzip, lz4 or zstd batches — or no key at all, the partition left to the
 * client's sticky choice.
 *
 * <pre>
 * java -jar java-payment-producer.jar BOOTSTRAP TOPIC COMPRESSION keyed|unkeyed [EVENTS-FILE|-]
 * </pre>
 *
 * The events are JSON lines (idemguard's PaymentSucceeded as serde writes it: event_id, order_no,
 * request_id, ...), from the file or standard input; each line is one message, sent as it is.
 * Every line is sent before any is waited on, with a linger, so the lines of one run share
 * compressed batches (duplicates inside one batch). One JSON line per message on standard output,
 * in input order, once the broker acknowledged it: {"line":N,"partition":P,"offset":O}, N
 * counting events (blank lines are skipped).
 *
 * Exit status: 0 every message acknowledged; 1 a message was not (each named on standard error);
 * 2 a usage error or an input it cannot send (unreadable, a keyed line without order_no).
 */
public final class PaymentProducer {
    private static final String USAGE =
            "usage: java-payment-producer BOOTSTRAP TOPIC none|gzip|snappy|lz4|zstd keyed|unkeyed [EVENTS-FILE|-]";

    /** The headers idemguard's consumer and trace read, each from the body field of its ID. */
    private static final String[][] HEADERS = {
        {"eventId", "event_id"}, {"requestId", "request_id"}, {"orderNo", "order_no"},
    };

    private PaymentProducer() {}

    public static void main(String[] args) {
        // slf4j-simple: the client's warnings (a broker it cannot reach), not its config dump.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        if (args.length < 4 || args.length > 5) {
            exit(2, USAGE);
        }
        String bootstrap = args[0], topic = args[1], compression = args[2], keying = args[3];
        if (!keying.equals("keyed") && !keying.equals("unkeyed")) {
            exit(2, "the fourth argument is keyed or unkeyed, not `" + keying + "`\n" + USAGE);
        }
        List<String> lines = readLines(args.length == 5 ? args[4] : "-");
        System.exit(send(producerConfig(bootstrap, compression), topic, keying.equals("keyed"), lines));
    }

    static Properties producerConfig(String bootstrap, String compression) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "java-payment-producer");
        // Idempotence: a retried send is written once, in order (it needs acks=all).
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        // No partitioner.class: the client's built-in one (murmur2 of a key, sticky without).
        p.put(ProducerConfig.LINGER_MS_CONFIG, "50");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    /** Sends every line, then waits for each acknowledgement; the exit status. */
    static int send(Properties config, String topic, boolean keyed, List<String> lines) {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        int failed = 0;
        try (KafkaProducer<String, byte[]> producer =
                new KafkaProducer<>(config, new StringSerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < lines.size(); i++) {
                String line = lines.get(i);
                String key = keyed ? field(line, "order_no") : null;
                if (keyed && key == null) {
                    exit(2, "line " + (i + 1) + " has no order_no to key it by: " + line);
                }
                RecordHeaders headers = new RecordHeaders();
                for (String[] h : HEADERS) {
                    String value = field(line, h[1]);
                    if (value != null) {
                        headers.add(h[0], value.getBytes(StandardCharsets.UTF_8));
                    }
                }
                byte[] body = line.getBytes(StandardCharsets.UTF_8);
                sent.add(producer.send(new ProducerRecord<>(topic, null, key, body, headers)));
            }
            producer.flush();
            for (int i = 0; i < sent.size(); i++) {
                try {
                    RecordMetadata m = sent.get(i).get();
                    System.out.printf("{\"line\":%d,\"partition\":%d,\"offset\":%d}%n",
                            i + 1, m.partition(), m.offset());
                } catch (ExecutionException e) {
                    System.err.println("line " + (i + 1) + " was not sent to " + topic + ": " + e.getCause());
                    failed++;
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    exit(1, "interrupted waiting for the broker's acknowledgements");
                }
            }
        } catch (KafkaException e) {
            System.err.println("the producer failed (" + bootstrap(config) + ", topic " + topic + "): " + e);
            return 1;
        }
        System.out.flush();
        if (failed > 0) {
            System.err.println(failed + " of " + lines.size() + " message(s) not acknowledged");
            return 1;
        }
        return 0;
    }

    /**
     * A top-level string field of a JSON line, by pattern: the lines are PaymentSucceeded as
     * serde writes it (flat, IDs without escapes), and the client brings no JSON parser.
     */
    static String field(String line, String name) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(name) + "\"\\s*:\\s*\"([^\"\\\\]*)\"").matcher(line);
        return m.find() ? m.group(1) : null;
    }

    static List<String> readLines(String source) {
        List<String> out = new ArrayList<>();
        try (BufferedReader r = source.equals("-")
                ? new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
                : Files.newBufferedReader(Path.of(source), StandardCharsets.UTF_8)) {
            for (String line = r.readLine(); line != null; line = r.readLine()) {
                if (!line.isBlank()) {
                    out.add(line);
                }
            }
        } catch (IOException e) {
            exit(2, "cannot read the events from " + (source.equals("-") ? "standard input" : source) + ": " + e);
        }
        return out;
    }

    private static String bootstrap(Properties config) {
        return config.getProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG);
    }

    private static void exit(int status, String message) {
        System.err.println("java-payment-producer: " + message);
        System.exit(status);
    }
}
