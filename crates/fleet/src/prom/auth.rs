//! The store's credentials, and the `Authorization` header each request carries.

/// Credentials, read from the environment by the command line (never from a flag, which
/// would show in `ps`).
#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(String),
    Basic {
        user: String,
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::None => "None",
            Auth::Bearer(_) => "Bearer(<redacted>)",
            Auth::Basic { .. } => "Basic(<redacted>)",
        })
    }
}

impl Auth {
    /// The `Authorization` header's value; None without credentials.
    pub(crate) fn header(&self) -> Option<String> {
        match self {
            Auth::None => None,
            Auth::Bearer(token) => Some(format!("Bearer {token}")),
            Auth::Basic { user, password } => {
                use base64::Engine as _;
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                Some(format!("Basic {pair}"))
            }
        }
    }
}
