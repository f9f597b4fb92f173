//! What a URL given in the configuration must look like: absolute `http://` or
//! `https://` with a host.
//!
//! One check for every URL the agent posts to (receivers, the advice API), used by
//! `check-config` and `run` alike. Its messages never quote the URL: chat webhook URLs
//! carry their token in the path or query, so the caller names the option or the
//! environment variable instead.

use ureq::http::Uri;

/// Why a URL is refused; the text says so without the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlProblem {
    #[error("is not a valid URL")]
    Unparseable,
    /// The scheme is shown (it is never secret); the rest is not.
    #[error("must start with http:// or https://, not {0}")]
    Scheme(String),
    #[error("has no host")]
    NoHost,
}

/// Checks that `url` (surrounding blanks ignored) is an absolute http(s) URL with a host.
pub fn check_http_url(url: &str) -> Result<(), UrlProblem> {
    let uri: Uri = url.trim().parse().map_err(|_| UrlProblem::Unparseable)?;
    match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https") => {}
        Some(other) => return Err(UrlProblem::Scheme(format!("{other}://"))),
        None => return Err(UrlProblem::Scheme("a bare host or path".into())),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(UrlProblem::NoHost);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_with_a_host() {
        for url in [
            "http://127.0.0.1:9093",
            "https://open.feishu.cn/open-apis/bot/v2/hook/abc",
            " https://hooks.slack.com/services/T/B/x ",
            "http://[::1]:8080/hook?x=1",
        ] {
            assert_eq!(check_http_url(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn refuses_other_schemes_garbage_and_hostless_urls_without_quoting_them() {
        for (url, expected) in [
            ("not a url", UrlProblem::Unparseable),
            ("", UrlProblem::Unparseable),
            (
                "ftp://host/send?key=SECRETKEY",
                UrlProblem::Scheme("ftp://".into()),
            ),
            ("example.com/hook", UrlProblem::Unparseable),
            (
                "localhost:8080",
                UrlProblem::Scheme("a bare host or path".into()),
            ),
            (
                "/hook/SECRETKEY",
                UrlProblem::Scheme("a bare host or path".into()),
            ),
        ] {
            let err = check_http_url(url).expect_err(url);
            assert_eq!(err, expected, "{url}");
            assert!(!err.to_string().contains("SECRETKEY"), "{err}");
        }
    }
}
