//! Where settings like `DEEPSEEK_API_KEY` come from (SPEC S8): the environment, then `./.env`,
//! then `$DSH_HOME/.env`. Values are looked up, never printed.

use std::collections::HashMap;
use std::path::Path;

/// Variables from the environment with `.env` files as fallbacks.
#[derive(Debug, Default, Clone)]
pub struct Settings {
    files: Vec<HashMap<String, String>>,
}

impl Settings {
    /// Reads `./.env` (relative to `cwd`) and `home/.env` if they exist. A line that is not
    /// `KEY=VALUE` is skipped; an unreadable file is reported as a warning on stderr.
    pub fn load(cwd: &Path, home: &Path) -> Settings {
        let mut files = Vec::new();
        for path in [cwd.join(".env"), home.join(".env")] {
            match std::fs::read_to_string(&path) {
                Ok(text) => files.push(parse_env_file(&text)),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => eprintln!("dsh: warning: cannot read {}: {err}", path.display()),
            }
        }
        Settings { files }
    }

    /// The value of `name`: environment first, then the files in order. Blank values count as
    /// unset.
    pub fn get(&self, name: &str) -> Option<String> {
        if let Some(value) = std::env::var(name).ok().filter(|v| !v.trim().is_empty()) {
            return Some(value);
        }
        self.files
            .iter()
            .find_map(|file| file.get(name).filter(|v| !v.trim().is_empty()).cloned())
    }
}

/// Parses `KEY=VALUE` lines: `#` comments, optional `export `, optional single or double quotes.
pub fn parse_env_file(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let value = if value.len() >= 2
            && ((value.starts_with('"') && value.ends_with('"'))
                || (value.starts_with('\'') && value.ends_with('\'')))
        {
            &value[1..value.len() - 1]
        } else {
            value
        };
        out.insert(key.to_string(), value.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_env_file_forms() {
        let map = parse_env_file(
            "# comment\nexport A=1\nB = \"two words\"\nC='x'\nnot a pair\n=novalue\nD=\n",
        );
        assert_eq!(map.get("A").map(String::as_str), Some("1"));
        assert_eq!(map.get("B").map(String::as_str), Some("two words"));
        assert_eq!(map.get("C").map(String::as_str), Some("x"));
        assert_eq!(map.get("D").map(String::as_str), Some(""));
        assert_eq!(map.len(), 4);
    }
}
