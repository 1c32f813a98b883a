//! The dashboard in a real browser: Debian's headless `chromium`, driven through
//! `chromium-driver` over WebDriver (the test script installs both). A live server with jobs
//! of three projects; the page signs in from a `fairway ui` link, shows who holds which GPU
//! and why the queue waits, follows a preemption as it happens, opens a job's page with its
//! history and log, cancels a job for an admin, shows a viewer only its own project, and
//! does all that without one console error, with every control reachable by keyboard and
//! every text readable (WCAG AA contrast) on a 1366×768 laptop screen.
//!
//! `FAIRWAY_SCREENSHOTS=docs/screenshots` also saves the main views as PNG files there.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fairway_server::api::JobState;
use fantoccini::actions::InputSource;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::Browser;
use crate::server::{InProcess, trainer_job};

const WAIT: Duration = Duration::from_secs(30);

/// chromedriver's browser log since the last read (`goog:loggingPrefs`).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

pub async fn console_errors(c: &Client) -> Vec<String> {
    let entries = c.issue_cmd(BrowserLog).await.expect("the browser log");
    entries
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn wait_css(c: &Client, css: &str) -> fantoccini::elements::Element {
    c.wait().at_most(WAIT).for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("waiting for {css}: {e}"))
}

/// Waits until `script` (an expression) is true in the page.
pub async fn wait_true(c: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let value = c.execute(&format!("return Boolean({script});"), vec![]).await.unwrap();
        if value == Value::Bool(true) {
            return;
        }
        if Instant::now() > deadline {
            let text = c.execute("return document.body.innerText;", vec![]).await.unwrap();
            panic!("timed out waiting for {what} ({script}); the page says:\n{}", text.as_str().unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of the first element `css` matches, once there is one. The page re-renders as
/// it polls: an element found may be replaced before its text is read (a stale
/// reference), and is then found again.
async fn text(c: &Client, css: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        match wait_css(c, css).await.text().await {
            Ok(text) => return text,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference && Instant::now() < deadline => {}
            Err(e) => panic!("the text of {css}: {e}"),
        }
    }
}

async fn screenshot(c: &Client, name: &str) {
    let Some(dir) = std::env::var_os("FAIRWAY_SCREENSHOTS") else { return };
    let dir = crate::docs::repo().join(PathBuf::from(dir));
    std::fs::create_dir_all(&dir).unwrap();
    // Let the last poll land and the focus ring go.
    c.execute("document.activeElement && document.activeElement.blur();", vec![]).await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), c.screenshot().await.unwrap()).unwrap();
}

/// The link `fairway ui` prints for a token (its first line; the second says whose it is).
fn fairway_ui(base: &str, token: &str, dir: &std::path::Path) -> String {
    let file = dir.join("token");
    std::fs::write(&file, token).unwrap();
    let out = std::process::Command::new(crate::server::FAIRWAY)
        .args(["--server", base, "--token-file"])
        .arg(&file)
        .arg("ui")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = stdout.lines();
    let link = lines.next().unwrap().to_owned();
    let whose = lines.next().unwrap_or_default();
    assert!(whose.contains("as user root") && whose.contains("(admin)"), "{whose}");
    link
}

/// The lowest contrast ratio of any visible text against the background behind it (WCAG's
/// relative luminance), and where it is.
const CONTRAST_SCRIPT: &str = r#"
function channel(c) { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); }
function rgba(text) { const m = text.match(/[\d.]+/g).map(Number); return { r: m[0], g: m[1], b: m[2], a: m.length > 3 ? m[3] : 1 }; }
function luminance(c) { return 0.2126 * channel(c.r) + 0.7152 * channel(c.g) + 0.0722 * channel(c.b); }
function background(node) {
  for (let n = node; n; n = n.parentElement) {
    const c = rgba(getComputedStyle(n).backgroundColor);
    if (c.a > 0.5) return c;
  }
  return { r: 255, g: 255, b: 255, a: 1 };
}
let worst = { ratio: 21, where: "" };
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let t = walker.nextNode(); t; t = walker.nextNode()) {
  const node = t.parentElement;
  if (!t.textContent.trim() || !node.getClientRects().length || getComputedStyle(node).visibility === "hidden") continue;
  const fg = rgba(getComputedStyle(node).color), bg = background(node);
  const [hi, lo] = [luminance(fg), luminance(bg)].sort((a, b) => b - a);
  const ratio = (hi + 0.05) / (lo + 0.05);
  if (ratio < worst.ratio) worst = { ratio, where: node.tagName + "." + node.className + ": " + t.textContent.trim().slice(0, 40) };
}
return worst;
"#;

async fn check_contrast_and_fit(c: &Client, view: &str) {
    let worst = c.execute(CONTRAST_SCRIPT, vec![]).await.unwrap();
    let ratio = worst["ratio"].as_f64().unwrap();
    assert!(ratio >= 4.5, "{view}: text with contrast {ratio:.2} < 4.5: {}", worst["where"]);
    let wide = c
        .execute(
            "const width = document.documentElement.clientWidth;\
             if (document.documentElement.scrollWidth <= width) return [];\
             return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > width)\
               .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(wide, json!([]), "{view}: the page scrolls sideways on a 1366-pixel screen");
}

/// Presses Tab up to `presses` times from the top of the page; what took the focus, in order.
async fn tab_through(c: &Client, presses: usize) -> Vec<String> {
    c.execute("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);", vec![]).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..presses {
        let actions = fantoccini::actions::KeyActions::new("keyboard".into())
            .then(fantoccini::actions::KeyAction::Down { value: fantoccini::key::Key::Tab.into() })
            .then(fantoccini::actions::KeyAction::Up { value: fantoccini::key::Key::Tab.into() });
        c.perform_actions(actions).await.unwrap();
        let focused = c
            .execute(
                "const e = document.activeElement; return e.tagName + ' ' + (e.getAttribute('aria-label') || e.textContent.trim().slice(0, 40));",
                vec![],
            )
            .await
            .unwrap();
        seen.push(focused.as_str().unwrap_or_default().to_owned());
    }
    c.execute("document.activeElement && document.activeElement.blur();", vec![]).await.unwrap();
    seen
}

#[test]
fn the_dashboard_shows_a_live_server_in_a_real_browser() {
    // ads has a cap; speech and nlp share a cohort and run nothing (the quota view's rows);
    // fair sharing (each tier has one tenant waiting at a time) gives the quota view a share;
    // the first job that cannot start reserves a GPU (its page shows where and when).
    let config = "quotas: [{ project: ads, gpus_max: 3 }]\ncohorts:\n  - name: lab\n    members:\n      \
                  - { project: speech, nominal: { gpus: 1 } }\n      \
                  - { project: nlp, nominal: { gpus: 1 }, borrowing_limit: { gpus: 1 } }\n\
                  fair_share: { half_life_seconds: 0 }\nreservations: { count: 1, default_runtime_seconds: 600 }\n";
    // A cohort made through the API that the config contradicts at the next start-up (it
    // puts speech in lab): listed, not in effect.
    let server = InProcess::start("2x2", "");
    let old = r#"{"members": [{"project": "speech", "nominal": {"gpus": 2}}]}"#;
    assert_eq!(server.api.json("PUT", "/v1/cohorts/old", Some(old)).0, 200);
    let server = server.restart_with_config(config);
    let api = &server.api;
    let base = api.base.clone();
    let admin = crate::server::admin_token(server.data_dir.path());
    let logs = tempfile::tempdir().unwrap();

    // Four GPUs on two nodes: vision's sweep (medium) and nightly (low) hold two each;
    // ads' explore (low) waits, since low does not preempt low.
    let sweep = api.submit(&trainer_job("sweep", "vision", "medium", 2, 100_000, 50))[0];
    // nightly ignores SIGTERM: preempted, it holds its GPUs for its whole 4 s of grace.
    let nightly = api.submit(
        "name: nightly\ntenant: { user: vision-user, project: vision }\npriority: low\nresources: { gpus: 2 }\n\
         command: [sh, -c, \"trap '' TERM; echo step 1; while true; do sleep 1; done\"]\npreemption_grace_seconds: 4\n",
    )[0];
    api.wait_state(sweep, JobState::Running);
    api.wait_state(nightly, JobState::Running);
    let explore = api.submit(&trainer_job("explore", "ads", "low", 1, 100_000, 50))[0];
    let (status, created) = api.json(
        "POST",
        "/v1/tokens",
        Some(r#"{"user": "ads-user", "project": "ads", "role": "viewer", "name": "ads-viewer"}"#),
    );
    assert_eq!(status, 201, "{created}");
    let viewer = created["secret"].as_str().unwrap().to_owned();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // The API client blocks on its own runtime: out of this one's context while it does.
    use tokio::task::block_in_place as sync;
    rt.block_on(async {
        let browser = Browser::start(&logs.path().join("chromedriver.log")).await;
        let c = &browser.client;

        // Signed in by the link `fairway ui` prints; the token leaves the address bar.
        let link = sync(|| fairway_ui(&base, &admin, logs.path()));
        assert_eq!(link, format!("{base}/ui/#token={admin}"));
        c.goto(&link).await.unwrap();
        wait_css(c, &format!("a.gpu[data-job-id='{sweep}']")).await;
        assert_eq!(c.current_url().await.unwrap().fragment(), Some("/cluster"));
        assert_eq!(c.title().await.unwrap(), "Fairway");
        let cells = c.find_all(Locator::Css(&format!("a.gpu[data-job-id='{nightly}']"))).await.unwrap();
        assert_eq!(cells.len(), 2, "nightly holds two GPUs");
        let label = cells[0].attr("aria-label").await.unwrap().unwrap();
        assert!(label.contains("nightly") && label.contains("vision") && label.contains("low"), "{label}");
        let summary = text(c, ".summary").await;
        assert!(summary.contains("4 / 4 GPUs allocated") && summary.contains("1 jobs pending"), "{summary}");
        // explore's reservation, under the node it is on: why a GPU there may stay idle.
        wait_true(c, "a reservation under a node", "document.querySelector('ul.reserved li') !== null").await;
        let reserved = text(c, "ul.reserved").await;
        assert!(reserved.starts_with(&format!("1 GPU reserved for explore (#{explore}), from ")), "{reserved}");
        check_contrast_and_fit(c, "cluster").await;
        screenshot(c, "dashboard-cluster").await;

        // The queues: explore waits first in line, and says why.
        c.find(Locator::Css("nav a[data-view='queues']")).await.unwrap().click().await.unwrap();
        let row = text(c, &format!("#pending tr[data-row-job='{explore}']")).await;
        assert!(row.starts_with("1 explore ads ads-user low 1"), "{row}");
        assert!(row.contains(" · GPUs reserved"), "explore holds the reservation: {row}");
        assert!(row.contains("no room") || row.contains("GPU"), "the reason it waits: {row}");
        let queues = text(c, "#queues tbody").await;
        assert!(queues.contains("low ads 1 0 0"), "{queues}");
        check_contrast_and_fit(c, "queues").await;
        screenshot(c, "dashboard-queues").await;

        // Every control is reachable by keyboard: the views, the jobs, the cancel buttons.
        let focused = tab_through(c, 20).await;
        for wanted in ["A Cluster", "A Queues", "A Quotas", "A explore", "BUTTON Cancel explore"] {
            assert!(focused.iter().any(|f| f.starts_with(wanted)), "Tab never reached {wanted:?}: {focused:?}");
        }
        // explore's page: the GPU it has reserved, on a node, for when the runs are
        // expected to end (the default 600 s, no limits given).
        c.goto(&format!("{base}/ui/#/jobs/{explore}")).await.unwrap();
        wait_true(
            c,
            "explore's reservation",
            "document.querySelector('dl.facts') && document.querySelector('dl.facts').textContent.includes('Reserved')",
        )
        .await;
        let facts = text(c, "dl.facts").await;
        let reserved = facts.lines().skip_while(|l| *l != "Reserved").nth(1).unwrap_or_default();
        assert!(reserved.starts_with("node-") && reserved.contains(" (1 replica, 1 GPU) from "), "{facts}");
        // And, with fair sharing on, the shares that rank it in its priority.
        let fair = facts.lines().skip_while(|l| *l != "Fair share").nth(1).unwrap_or_default();
        assert!(
            fair.starts_with("project ")
                && fair.contains(", user ")
                && fair.ends_with("(least goes first in its priority)"),
            "{facts}"
        );

        // A preemption as it happens: ctr-model (high, ads) takes nightly's two GPUs.
        let ctr = sync(|| api.submit(&trainer_job("ctr-model", "ads", "high", 2, 100_000, 50))[0]);
        // While nightly stops, its GPUs are promised to ctr-model, and the cells say so.
        c.find(Locator::Css("nav a[data-view='cluster']")).await.unwrap().click().await.unwrap();
        wait_true(
            c,
            "nightly's GPUs held for ctr-model",
            &format!(
                "document.querySelectorAll(\"a.gpu.held[data-job-id='{nightly}'][data-held-for='{ctr}']\").length === 2"
            ),
        )
        .await;
        let held = text(c, &format!("a.gpu.held[data-held-for='{ctr}']")).await;
        assert!(held.contains("nightly") && held.contains(&format!("ctr-model (#{ctr})")), "{held}");
        let summary = text(c, ".summary").await;
        assert!(summary.contains("2 held for preemptors"), "{summary}");
        screenshot(c, "dashboard-preemption").await;
        c.find(Locator::Css("nav a[data-view='queues']")).await.unwrap().click().await.unwrap();
        wait_true(
            c,
            "nightly back in the queue",
            &format!("document.querySelector(\"#pending tr[data-row-job='{nightly}']\")"),
        )
        .await;
        c.find(Locator::Css("nav a[data-view='cluster']")).await.unwrap().click().await.unwrap();
        wait_true(
            c,
            "ctr-model on two GPUs",
            &format!("document.querySelectorAll(\"a.gpu[data-job-id='{ctr}']\").length === 2"),
        )
        .await;
        assert!(c.find_all(Locator::Css(&format!("a.gpu[data-job-id='{nightly}']"))).await.unwrap().is_empty());

        // The job's page: its facts, history and log.
        c.find(Locator::Css(&format!("a.gpu[data-job-id='{ctr}']"))).await.unwrap().click().await.unwrap();
        assert_eq!(text(c, "#job-title").await, format!("ctr-model (#{ctr})"));
        wait_true(
            c,
            "ctr-model's log",
            "document.querySelector('pre.log') && document.querySelector('pre.log').textContent.includes('step')",
        )
        .await;
        let events = text(c, "#events").await;
        assert!(events.contains("submitted") && events.contains("started"), "{events}");
        c.goto(&format!("{base}/ui/#/jobs/{nightly}")).await.unwrap();
        wait_true(
            c,
            "nightly's preemption",
            "document.querySelector('#events') && document.querySelector('#events').textContent.includes('preempted')",
        )
        .await;
        let facts = text(c, "dl.facts").await;
        assert!(facts.contains("State\npending") && facts.contains("Preempted\n1 time\n"), "{facts}");
        check_contrast_and_fit(c, "job").await;
        screenshot(c, "dashboard-job").await;

        // An admin cancels explore from the page.
        c.goto(&format!("{base}/ui/#/queues")).await.unwrap();
        wait_css(c, &format!("button[data-key='cancel-{explore}']")).await.click().await.unwrap();
        c.accept_alert().await.unwrap();
        wait_true(
            c,
            "explore gone from the queue",
            &format!("!document.querySelector(\"#pending tr[data-row-job='{explore}']\")"),
        )
        .await;
        sync(|| api.wait_state(explore, JobState::Cancelled));
        c.goto(&format!("{base}/ui/#/quotas")).await.unwrap();
        let quotas = text(c, "#quotas tbody").await;
        let ads = quotas.lines().position(|l| l.starts_with("project ads")).expect("ads' quota row");
        // Its share with a half-life of 0: (2 held + 2 held recently) / 4 GPUs, and its weight.
        assert!(
            quotas.lines().nth(ads + 1).is_some_and(|l| l.trim() == "2 / 3 1.000 1"),
            "ctr-model's 2 GPUs of 3, share 1, weight 1: {quotas}"
        );
        let head = text(c, "#quotas thead").await;
        assert!(head.contains("Fair share") && head.contains("Weight"), "{head}");
        let bar = c.find(Locator::Css("#quotas [role=meter]")).await.unwrap();
        assert_eq!(bar.attr("aria-valuenow").await.unwrap().as_deref(), Some("2"));
        let cohorts = text(c, "#cohorts tbody").await;
        // Speech may borrow all the cohort lends; nlp at most 1 GPU.
        assert!(cohorts.contains("lab speech 0 1 0 none") && cohorts.contains("lab nlp 0 1 0 1"), "{cohorts}");
        // The left-out cohort says so by its name, and why in its title; it borrows nothing.
        assert!(cohorts.contains("old (not in effect) speech 0 2 – none"), "{cohorts}");
        let title = c.find(Locator::Css("#cohorts td[title]")).await.unwrap().attr("title").await.unwrap();
        assert!(title.is_some_and(|t| t.contains("\"speech\" is already a member of cohort \"lab\"")), "{cohorts}");
        screenshot(c, "dashboard-quotas").await;
        check_contrast_and_fit(c, "quotas").await;

        let errors = console_errors(c).await;
        assert!(errors.is_empty(), "console errors: {errors:#?}");

        // A viewer of ads: its own jobs only, vision's GPUs only as taken, nothing to cancel.
        c.goto(&format!("{base}/ui/#token={viewer}")).await.unwrap();
        wait_css(c, &format!("a.gpu[data-job-id='{ctr}']")).await;
        let taken = c.find_all(Locator::Css("span.gpu.other")).await.unwrap();
        assert_eq!(taken.len(), 2, "sweep's two GPUs, unnamed");
        let page = c.execute("return document.body.innerText;", vec![]).await.unwrap();
        assert!(!page.as_str().unwrap().contains("sweep") && !page.as_str().unwrap().contains("vision"), "{page}");
        c.find(Locator::Css("nav a[data-view='queues']")).await.unwrap().click().await.unwrap();
        wait_css(c, &format!("#running tr[data-row-job='{ctr}']")).await;
        assert!(c.find_all(Locator::Css("button.danger")).await.unwrap().is_empty(), "a viewer cancels nothing");
        assert!(text(c, "#who").await.contains("ads-user (ads, viewer)"));
        let errors = console_errors(c).await;
        assert!(errors.is_empty(), "console errors: {errors:#?}");

        // No token: the sign-in form; a wrong one is refused, and says so.
        c.execute("sessionStorage.clear();", vec![]).await.unwrap();
        // One navigation to a new address loads the page afresh (a `goto` then `refresh`
        // raced on a loaded host: the refresh was aborted by the navigation still running).
        c.goto(&format!("{base}/ui/?signed-out")).await.unwrap();
        let input = wait_css(c, "#login:not([hidden]) #token").await;
        input.send_keys(&format!("fwt_{}", "0".repeat(64))).await.unwrap();
        c.find(Locator::Css("#login-form button")).await.unwrap().click().await.unwrap();
        wait_true(c, "the refusal", "document.querySelector('#login-error').textContent.length > 0").await;
        let refusal = text(c, "#login-error").await;
        assert!(refusal.to_lowercase().contains("token"), "{refusal}");

        browser.close().await;
    });
}
