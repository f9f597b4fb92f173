//! The line of a key in block-style YAML, for problems found after the file was read
//! (a certificate that does not load, a policy without its CA). serde_norway keeps no
//! positions once a value is built, so the text is searched: each key of the path must
//! sit deeper than its parent and inside the parent's block.

/// The line of the deepest key of `path` that is written (a missing option points at its
/// section), or None when not even the first is.
pub(crate) fn line_of_key(text: &str, path: &[&str]) -> Option<usize> {
    let mut found: Option<usize> = None;
    // Indentation of the key matched last; None before the first.
    let mut parent_indent: Option<usize> = None;
    let mut depth = 0;
    for (i, line) in text.lines().enumerate() {
        if depth == path.len() {
            break;
        }
        let content = line.trim_start();
        if content.is_empty() || content.starts_with('#') || content == "---" {
            continue;
        }
        let indent = line.len() - content.len();
        if let Some(parent) = parent_indent {
            if indent <= parent {
                // Left the parent's block without finding the next key.
                break;
            }
        } else if indent != 0 {
            continue;
        }
        if key_of(content) == Some(path[depth]) {
            found = Some(i + 1);
            parent_indent = Some(indent);
            depth += 1;
        }
    }
    found
}

/// The key a `key: value` line starts with, unquoted.
fn key_of(content: &str) -> Option<&str> {
    let (key, _) = content.split_once(':')?;
    let key = key.trim();
    let unquoted = key
        .strip_prefix('"')
        .and_then(|k| k.strip_suffix('"'))
        .or_else(|| key.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')))
        .unwrap_or(key);
    Some(unquoted)
}
