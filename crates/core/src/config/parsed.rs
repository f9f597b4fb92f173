//! Values written as text in the file and parsed once, when the file is read.
//!
//! A label matcher or a receiver kind is a typed value from the moment the configuration
//! is deserialized: nothing downstream parses text again. One that does not parse is not a
//! deserialization error, though: serde stops at its first error, and a configuration is
//! meant to report *every* problem in one pass, each with its key and line (the value
//! checks of `config/alerting.rs` do that for these). So a bad value is kept as
//! [`Parsed::Invalid`], with its text and why, and [`crate::config::Config::parse`] refuses
//! the file with it among the other problems. A configuration that loaded holds only
//! [`Parsed::Valid`] values; code that builds from one made by hand (tests) still meets
//! `Invalid` and refuses it as the value checks would.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// A value parsed from its text, or the text that did not parse and why.
pub enum Parsed<T: FromStr> {
    Valid(T),
    Invalid {
        /// As written in the file.
        text: String,
        error: T::Err,
    },
}

impl<T: FromStr> Parsed<T> {
    /// Parses `text` (as deserialization does).
    pub fn parse(text: &str) -> Parsed<T> {
        match text.parse() {
            Ok(value) => Parsed::Valid(value),
            Err(error) => Parsed::Invalid {
                text: text.to_string(),
                error,
            },
        }
    }

    /// The value, when the text parsed.
    pub fn valid(&self) -> Option<&T> {
        match self {
            Parsed::Valid(value) => Some(value),
            Parsed::Invalid { .. } => None,
        }
    }
}

/// Text as a configuration file would hold it: `kind: "webhook".into()` in code that
/// builds entries by hand.
impl<T: FromStr> From<&str> for Parsed<T> {
    fn from(text: &str) -> Parsed<T> {
        Parsed::parse(text)
    }
}

impl<'de, T: FromStr> Deserialize<'de> for Parsed<T> {
    /// Anything but a string is still a type error (with serde's own message); a string
    /// always deserializes, parsed or not.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Parsed<T>, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Parsed::parse(&text))
    }
}

impl<T> fmt::Debug for Parsed<T>
where
    T: FromStr + fmt::Debug,
    T::Err: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parsed::Valid(value) => f.debug_tuple("Valid").field(value).finish(),
            Parsed::Invalid { text, error } => f
                .debug_struct("Invalid")
                .field("text", text)
                .field("error", error)
                .finish(),
        }
    }
}

impl<T> Clone for Parsed<T>
where
    T: FromStr + Clone,
    T::Err: Clone,
{
    fn clone(&self) -> Self {
        match self {
            Parsed::Valid(value) => Parsed::Valid(value.clone()),
            Parsed::Invalid { text, error } => Parsed::Invalid {
                text: text.clone(),
                error: error.clone(),
            },
        }
    }
}

impl<T> PartialEq for Parsed<T>
where
    T: FromStr + PartialEq,
    T::Err: PartialEq,
{
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Parsed::Valid(a), Parsed::Valid(b)) => a == b,
            (
                Parsed::Invalid { text, error },
                Parsed::Invalid {
                    text: other_text,
                    error: other_error,
                },
            ) => text == other_text && error == other_error,
            _ => false,
        }
    }
}
