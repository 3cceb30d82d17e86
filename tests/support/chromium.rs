//! A page looked at as a person would: Debian's `chromium`, headless, renders a file to a PNG
//! and says what the page did. No DevTools protocol is needed:
//!
//! - **console**: `--enable-logging=stderr --v=0` writes every console message of the page
//!   (a script's `console.*`, an uncaught error, a Content-Security-Policy violation) to stderr
//!   as a line with `:INFO:CONSOLE`; every such line is returned;
//! - **network**: `--log-net-log=FILE` records every URL request of the browser with its network
//!   partition; the page's own requests are those whose partition (`network_isolation_key`) is
//!   the page's `file://` site, or whose initiator is the file page's opaque origin (`null`).
//!   The browser's own background requests (the component updater, which the flags cannot
//!   silence completely) are in another partition and are not the page's;
//! - **DOM**: `--dump-dom` prints the document after it loaded, as the browser parsed it;
//! - **picture**: `--screenshot` writes the viewport as a PNG.
//!
//! The browser is installed by `scripts/stack up` (or `scripts/stack chromium`, which this
//! runs when `chromium` is missing).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct Rendered {
    pub png: PathBuf,
    pub dom: String,
    /// Every console message of the page.
    pub console: Vec<String>,
    /// Every URL the page requested.
    pub page_requests: Vec<String>,
}

/// `chromium`, installed by the project's script if missing (as root, like CI).
fn chromium() -> &'static str {
    let present = |b: &str| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !present("chromium") {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/stack");
        let out = Command::new("bash")
            .args([script, "chromium"])
            .output()
            .expect("run scripts/stack chromium");
        assert!(
            out.status.success() && present("chromium"),
            "chromium is not installed and `scripts/stack chromium` could not install it: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    "chromium"
}

/// Renders `page` (a file) in a `width`×`height` viewport into `png`.
pub fn render(page: &Path, width: u32, height: u32, png: &Path) -> Rendered {
    let bin = chromium();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile");
    std::fs::create_dir(&profile).unwrap();
    let netlog = dir.path().join("netlog.json");
    let (stdout, stderr) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let page = std::path::absolute(page).unwrap();
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--log-net-log={}", netlog.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish rendering {} within 90 s",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(status.success(), "chromium failed ({status}): {err}");
    assert!(png.exists(), "chromium wrote no screenshot: {err}");
    Rendered {
        png: png.to_path_buf(),
        dom: std::fs::read_to_string(&stdout).unwrap(),
        console: err
            .lines()
            .filter(|l| l.contains(":INFO:CONSOLE"))
            .map(str::to_string)
            .collect(),
        page_requests: page_requests(&netlog),
    }
}

/// The URLs of the NetLog's requests made for the file page (see the module comment).
fn page_requests(netlog: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(netlog).expect("chromium wrote its net log");
    // A net log cut by the browser's exit lacks its closing brackets.
    let log: serde_json::Value = serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", text.trim_end().trim_end_matches(','))))
        .expect("the net log is JSON");
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("the net log names URL_REQUEST_START_JOB");
    log["events"]
        .as_array()
        .expect("net log events")
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| {
            let p = &e["params"];
            p["network_isolation_key"]
                .as_str()
                .is_some_and(|k| k.contains("file://"))
                || p["initiator"].as_str() == Some("null")
        })
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .collect()
}

/// The screenshot's pixels as RGB(A) rows: (width, height, bytes per pixel, data).
pub fn pixels(png: &Path) -> (u32, u32, usize, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bpp = info.color_type.samples();
    buf.truncate(info.buffer_size());
    (info.width, info.height, bpp, buf)
}

/// How many pixels of the screenshot are exactly `rgb`.
pub fn count_colour(png: &Path, rgb: [u8; 3]) -> usize {
    let (_, _, bpp, data) = pixels(png);
    data.chunks(bpp).filter(|p| p[..3] == rgb).count()
}
