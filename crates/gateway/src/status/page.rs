//! The page itself: HTML, CSS and script built into the binary (no CDN, no build step), and
//! the login form shown to a browser without the gateway key.

/// The page.
pub(super) const PAGE: &str = include_str!("page.html");
/// Where the page's script is served.
pub(super) const SCRIPT_PATH: &str = "/status/page.js";
/// The page's script: renders each snapshot of the event stream.
pub(super) const SCRIPT: &str = include_str!("page.js");
/// Where the page's style sheet is served.
pub(super) const STYLE_PATH: &str = "/status/page.css";
/// The page's style sheet.
pub(super) const STYLE: &str = include_str!("page.css");

/// The login form; `problem` is shown above it.
pub(super) fn login_page(problem: Option<&str>) -> String {
    let problem = problem.map_or(String::new(), |p| format!("<p class=\"problem\">{p}</p>"));
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>rebound · sign in</title>\
<link rel=\"stylesheet\" href=\"{STYLE_PATH}\"></head><body><main class=\"login\"><h1>rebound</h1>\
<p>This gateway has gateway keys. Enter one to see its status; it is kept in an HttpOnly cookie for this site only.</p>\
{problem}<form method=\"post\" action=\"/status/login\"><label>Gateway key <input type=\"password\" name=\"key\" autocomplete=\"off\" autofocus></label>\
<button type=\"submit\">Open the status page</button></form></main></body></html>"
    )
}
