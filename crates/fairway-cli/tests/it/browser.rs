//! Debian's headless Chromium through its WebDriver (`chromium` and `chromium-driver`, which
//! the test script installs), as the dashboard's tests and its benchmark drive it: one
//! session on a 1366×768 window, with the browser's log kept for the console checks. The
//! benchmark includes this file too (`benches/dashboard.rs`).

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// chromedriver and its browser session; chromedriver is killed when this is dropped (close
/// the session first, or the browser outlives it).
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// chromedriver on a free loopback port, writing to `log`, and a session on it.
    pub async fn start(log: &Path) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let out = std::fs::File::create(log).unwrap();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("chromedriver (the test script installs chromium-driver)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let binary = ["/usr/lib/chromium/chromium", "/usr/bin/chromium"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("Debian's chromium (the test script installs it)");
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": binary,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1366,768", "--lang=en-US"],
            },
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
        builder.capabilities(capabilities.as_object().unwrap().clone());
        let client = builder.connect(&format!("http://127.0.0.1:{port}")).await.expect("a WebDriver session");
        Browser { client, driver }
    }

    /// Ends the session (and with it the browser), then chromedriver.
    pub async fn close(self) {
        self.client.clone().close().await.expect("the WebDriver session ends");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
