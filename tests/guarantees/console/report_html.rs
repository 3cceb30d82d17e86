//! The HTML report looked at as a person would: the incident of the console's tests, written
//! into the real database, Redis and Kafka, reported as HTML and rendered by headless Chromium
//! (tests/support/chromium.rs says how its console and network are observed). The page loads
//! with no console message and no request of its own; each order has its five lanes, a mark
//! per row on its layer's lane, each stopped duplicate on the lane of the layer that stopped it;
//! a points row written twice crosses every lane in the alarm colour — on screen too; a payNo
//! holding markup and a `javascript:` link is shown as text. The rate chart holds the Rates
//! view's numbers.

use crate::console::fixture as console_fixture;
use crate::support::chromium;
use crate::support::report_page;

use console_fixture::{world, Incident, World};
use idemguard::config::Dialect;
use idemguard::console::cli::headless;
use idemguard::console::report::{self, IncidentReport, ReportFormat, ReportScope};
use idemguard::contracts::TraceTarget;
use scraper::Html;

const HOSTILE_PAY_NO: &str = "<script>alert(1)</script>[pay](javascript:alert(2))";
/// The alarm colour of the report (`svg::ALARM`), as the screenshot's pixels hold it.
const ALARM_RGB: [u8; 3] = [0xe0, 0x00, 0x00];

/// The report of the incident's order, written as HTML and rendered: the report, the page as
/// the browser parsed it, and the count of alarm-coloured pixels on screen.
async fn rendered(w: &World, inc: &Incident, name: &str) -> (IncidentReport, chromium::Rendered) {
    let r = report_of(w, inc).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_html");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join(format!("{name}-{:?}.html", w.dialect));
    std::fs::write(&page, ReportFormat::Html.render(&r)).unwrap();
    let png = dir.join(format!("{name}-{:?}.png", w.dialect));
    let shown = chromium::render(&page, 1100, 1000, &png);
    (r, shown)
}

/// The console's `:report html` of the incident's order, run until it says where it wrote.
async fn console_report_html(w: &World, inc: &Incident) -> idemguard::console::tui::app::App {
    use idemguard::console::tui::app::App;
    use idemguard::console::tui::backend::Backends;
    let mut backends = Backends::spawn(&w.config);
    let exec = backends.spawn_executor(&w.config, false);
    let mut app = App::new(&w.config, None);
    app.attach_executor(exec);
    app.run_command(&format!("report html {}", inc.order_no));
    console_fixture::pump_until(&mut app, &mut backends.updates, "the report written", |a| {
        a.ui.message
            .as_ref()
            .is_some_and(|(m, _, _)| m.starts_with("report "))
    })
    .await;
    backends.shutdown().await;
    app
}

/// The report of the incident's order, as `report --id` builds it.
async fn report_of(w: &World, inc: &Incident) -> IncidentReport {
    report::build(
        &w.config,
        &ReportScope::Id(TraceTarget::classify(&inc.order_no)),
    )
    .await
    .unwrap()
}

fn assert_loaded_quietly(shown: &chromium::Rendered) {
    assert!(
        shown.console.is_empty(),
        "console messages: {:?}",
        shown.console
    );
    assert!(
        shown.page_requests.is_empty(),
        "the page requested {:?}",
        shown.page_requests
    );
}

async fn a_report_shows_each_copy_on_its_lane_and_a_leak_across_every_lane(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    // What the provider sent as payNo, booked as it came.
    let sql = match dialect {
        Dialect::Postgres => "UPDATE payment_flow SET pay_no = $1 WHERE order_no = $2",
        Dialect::Mysql => "UPDATE payment_flow SET pay_no = ? WHERE order_no = ?",
    };
    sqlx::query(sql)
        .bind(HOSTILE_PAY_NO)
        .bind(&inc.order_no)
        .execute(&w.db.pool)
        .await
        .unwrap();

    let (r, shown) = rendered(&w, &inc, "clean").await;
    assert_loaded_quietly(&shown);
    let stopped = report_page::assert_report_page(&shown.dom, &r, false);
    // The incident: two replays at the API, the lock contended, two dedup hits.
    assert_eq!(
        stopped[0],
        [
            ("api".to_string(), 2),
            ("locks".into(), 1),
            ("database".into(), 0),
            ("stream".into(), 2),
            ("operator".into(), 0)
        ],
        "{dialect}"
    );
    // The payNo is text — in the table and in the hover of its mark — and nothing else.
    let dom = Html::parse_document(&shown.dom);
    let cells: String = dom
        .select(&report_page::sel("table.timeline td"))
        .flat_map(|c| c.text().collect::<Vec<_>>())
        .collect();
    assert!(
        cells.contains(HOSTILE_PAY_NO),
        "{dialect}: the payNo as text"
    );
    let titles: String = dom
        .select(&report_page::sel("g.mark title"))
        .flat_map(|c| c.text().collect::<Vec<_>>())
        .collect();
    assert!(
        titles.contains(HOSTILE_PAY_NO),
        "{dialect}: in the hover too"
    );
    let (width, height, _, _) = chromium::pixels(&shown.png);
    assert_eq!((width, height), (1100, 1000));
    assert_eq!(
        chromium::count_colour(&shown.png, ALARM_RGB),
        0,
        "{dialect}: nothing got through, no alarm on screen"
    );

    // A second points row for the order, from another event: no constraint stops it.
    inc.leak_points(&w).await;
    let (r, shown) = rendered(&w, &inc, "leaked").await;
    assert_loaded_quietly(&shown);
    assert_eq!(r.leaks.len(), 1, "{dialect}: {:?}", r.leaks);
    report_page::assert_report_page(&shown.dom, &r, true);
    let alarm = chromium::count_colour(&shown.png, ALARM_RGB);
    assert!(
        alarm > 500,
        "{dialect}: the leak is on screen in the alarm colour ({alarm} pixels)"
    );
}

per_dialect!(a_report_shows_each_copy_on_its_lane_and_a_leak_across_every_lane
    => a_report_shows_each_copy_and_a_leak_postgres, a_report_shows_each_copy_and_a_leak_mysql);

/// The instrument itself: a page that logs to its console and loads an image is seen doing
/// both, so a quiet report page is quiet for real.
#[test]
fn the_browser_check_sees_a_pages_console_and_its_requests() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("noisy.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><title>noisy</title><script>console.log('hello from the page')</script>\
         <img src=\"http://127.0.0.1:9/pixel.png\">",
    )
    .unwrap();
    let shown = chromium::render(&page, 400, 300, &dir.path().join("noisy.png"));
    assert!(
        shown
            .console
            .iter()
            .any(|l| l.contains("hello from the page")),
        "{:?}",
        shown.console
    );
    assert_eq!(shown.page_requests, ["http://127.0.0.1:9/pixel.png"]);
}

/// A window report's chart: per lane and minute, what `idemguard rates` counts in that minute.
async fn the_rate_chart_holds_the_rates_views_numbers(dialect: Dialect) {
    let w = world(dialect, 0).await;
    let inc = Incident::write(&w).await;
    let r = report::build(
        &w.config,
        &ReportScope::Window {
            since_ms: inc.t0 - 60_000,
            until_ms: idemguard::contracts::now_ms(),
        },
    )
    .await
    .unwrap();
    let rates = serde_json::to_value(headless::rates(&w.config).await).unwrap();
    let first = rates["data"]["rates"]["first_minute_ms"].as_i64().unwrap();
    let series = rates["data"]["rates"]["series"].as_array().unwrap().clone();
    let dom = Html::parse_document(&ReportFormat::Html.render(&r));
    let columns: Vec<_> = dom
        .select(&report_page::sel("svg.rates g.minute"))
        .collect();
    assert!(columns.len() >= 11, "{dialect}: a column per minute");
    let mut charted = 0;
    for g in columns {
        let minute: i64 = g.value().attr("data-minute-ms").unwrap().parse().unwrap();
        let index = ((minute - first) / 60_000) as usize;
        for lane in ["api", "locks", "database", "stream"] {
            let drawn: u64 = g
                .value()
                .attr(&format!("data-{lane}"))
                .unwrap()
                .parse()
                .unwrap();
            let counted: u64 = series
                .iter()
                .filter(|s| report_page::lane_of(s["layer"].as_str().unwrap()) == lane)
                .map(|s| s["per_minute"][index].as_u64().unwrap())
                .sum();
            assert_eq!(drawn, counted, "{dialect}: {lane} at minute {minute}");
            charted += drawn;
        }
    }
    assert_eq!(charted, 5, "{dialect}: the incident's five interceptions");
}

per_dialect!(the_rate_chart_holds_the_rates_views_numbers
    => the_rate_chart_holds_the_rates_views_numbers_postgres, the_rate_chart_holds_the_rates_views_numbers_mysql);

/// The console's `:report html ID` writes the same page into `console.report_dir`.
#[tokio::test]
async fn the_consoles_report_html_writes_the_page_into_the_report_dir() {
    let mut w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;
    let tmp = tempfile::tempdir().unwrap();
    w.config.console.report_dir = tmp.path().display().to_string();
    let app = console_report_html(&w, &inc).await;
    let path = tmp
        .path()
        .join(format!("idemguard-report-{}.html", inc.order_no));
    let said = &app.ui.message.as_ref().unwrap().0;
    assert!(
        said.starts_with(&format!("report written to {}:", path.display())),
        "{said}"
    );
    let page = std::fs::read_to_string(&path).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    let dom = Html::parse_document(&page);
    report_page::assert_inert(&dom);
    let marks = dom
        .select(&report_page::sel("svg.swimlanes g.mark"))
        .count();
    let r = report::build(
        &w.config,
        &ReportScope::Id(TraceTarget::classify(&inc.order_no)),
    )
    .await
    .unwrap();
    assert_eq!(marks, r.timelines[0].entries.len(), "a mark per row");
}

/// A shared `console.report_dir` where the next report's name is already a symbolic link to a
/// file elsewhere: that file keeps its content and mode, the link stays, and the report —
/// HTML from the console's `:report html`, Markdown from its writer — goes under the next free
/// name, which the console says. `idemguard report -o` onto a link refuses, saying why.
#[tokio::test]
async fn a_link_planted_at_a_reports_name_is_never_written_through() {
    use std::os::unix::fs::{symlink, PermissionsExt};

    let mut w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;
    let shared = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let victim = elsewhere.path().join("victim.conf");
    std::fs::write(&victim, "not a report\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let untouched = || {
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        let content = std::fs::read_to_string(&victim).unwrap();
        assert!(
            content == "not a report\n" && mode == 0o644,
            "the link's target was written: mode {mode:o}, {} bytes",
            content.len()
        );
    };
    w.config.console.report_dir = shared.path().display().to_string();
    let named = |suffix: &str, ext: &str| {
        shared
            .path()
            .join(format!("idemguard-report-{}{suffix}.{ext}", inc.order_no))
    };
    for ext in ["html", "md"] {
        symlink(&victim, named("", ext)).unwrap();
    }

    let app = console_report_html(&w, &inc).await;
    untouched();
    let said = &app.ui.message.as_ref().unwrap().0;
    let html = named("-2", "html");
    assert!(
        said.starts_with(&format!("report written to {}:", html.display())),
        "{said}"
    );
    assert!(std::fs::read_to_string(&html)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));

    let target = TraceTarget::classify(&inc.order_no);
    let md = report::write(&w.config, &target, ReportFormat::Markdown)
        .await
        .unwrap();
    untouched();
    assert_eq!(md.path, named("-2", "md"));
    for ext in ["html", "md"] {
        let link = std::fs::symlink_metadata(named("", ext)).unwrap();
        assert!(link.file_type().is_symlink(), "{ext}: the link is left");
        let mode = std::fs::metadata(named("-2", ext))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{ext}: the report is its owner's");
    }

    let run = std::process::Command::new(env!("CARGO_BIN_EXE_idemguard"))
        .args(["report", "--id", &inc.order_no, "-o"])
        .arg(named("", "md"))
        .env(
            "IDEMGUARD_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.toml"),
        )
        .env("IDEMGUARD_DATABASE__URL", &w.config.database.url)
        .env("IDEMGUARD_REDIS__URL", &w.config.redis.url)
        .env(
            "IDEMGUARD_KAFKA__PAYMENT_TOPIC",
            &w.config.kafka.payment_topic,
        )
        .env("IDEMGUARD_KAFKA__TRACE_TOPIC", &w.config.kafka.trace_topic)
        .output()
        .unwrap();
    untouched();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.code() == Some(1) && err.contains("symbolic link"),
        "report -o onto a link: {run:?}"
    );
}

/// A value of 5,000 characters without a break (a hostile payNo, a runaway detail) wraps inside
/// the page: the page is no wider than the browser's window. The page's own CSS is measured; the
/// test adds only a script (the page's policy, which forbids scripts, is taken out for it) that
/// writes the document's widths where `--dump-dom` shows them.
#[tokio::test]
async fn a_long_unbroken_value_wraps_inside_the_page() {
    let w = world(Dialect::Postgres, 0).await;
    let inc = Incident::write(&w).await;
    let mut r = report_of(&w, &inc).await;
    let long = "W".repeat(5_000);
    let entry = r.timelines[0].entries.first_mut().expect("an entry");
    entry.summary = long.clone();
    entry.source = long.clone();
    r.errors.push(long);
    let html = ReportFormat::Html.render(&r);
    let policy = html
        .find("<meta http-equiv=\"Content-Security-Policy\"")
        .expect("its policy");
    let policy_end = policy + html[policy..].find('>').unwrap() + 1;
    let measured = format!(
        "{}{}",
        &html[..policy],
        &html[policy_end..].replace(
            "</body>",
            "<script>document.body.dataset.widths = document.documentElement.scrollWidth + ' ' + document.documentElement.clientWidth;</script></body>",
        )
    );
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("long.html");
    std::fs::write(&page, measured).unwrap();
    let shown = chromium::render(&page, 900, 700, &dir.path().join("long.png"));
    let body = Html::parse_document(&shown.dom);
    let widths = body
        .select(&scraper::Selector::parse("body").unwrap())
        .next()
        .and_then(|b| b.value().attr("data-widths").map(str::to_string))
        .expect("the measuring script ran");
    let (scroll, client) = widths.split_once(' ').unwrap();
    let (scroll, client): (u32, u32) = (scroll.parse().unwrap(), client.parse().unwrap());
    assert!(
        scroll <= client,
        "the page is {scroll}px wide in a {client}px window: a long value overflows"
    );
}
