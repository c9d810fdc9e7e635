//! The server list: `--server`, else `BERTH_SERVER`, else the local dev
//! cluster's first node.

/// Where `berthd dev` puts its first node.
pub const DEFAULT_SERVER: &str = "127.0.0.1:7101";

/// The environment variable naming the servers, comma-separated.
pub const SERVER_ENV: &str = "BERTH_SERVER";

/// The servers to try, in order: from `flag` (the `--server` value) when
/// given, else from $BERTH_SERVER, else [`DEFAULT_SERVER`]. Both are
/// comma-separated `host:port` lists; an `http://` prefix is accepted and
/// dropped, blanks and empty entries are ignored.
pub fn servers_from(flag: Option<String>) -> Vec<String> {
    servers_from_sources(flag, std::env::var(SERVER_ENV).ok())
}

fn servers_from_sources(flag: Option<String>, env: Option<String>) -> Vec<String> {
    [flag, env]
        .into_iter()
        .flatten()
        .map(|list| parse_list(&list))
        .find(|list| !list.is_empty())
        .unwrap_or_else(|| vec![DEFAULT_SERVER.to_string()])
}

fn parse_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .map(|s| s.strip_prefix("http://").unwrap_or(s))
        .map(|s| s.trim_end_matches('/'))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flag_wins_over_env_which_wins_over_default() {
        assert_eq!(
            servers_from_sources(Some("a:1".into()), Some("b:2".into())),
            list(&["a:1"])
        );
        assert_eq!(
            servers_from_sources(None, Some("b:2,c:3".into())),
            list(&["b:2", "c:3"])
        );
        assert_eq!(servers_from_sources(None, None), list(&[DEFAULT_SERVER]));
    }

    #[test]
    fn prefixes_blanks_and_empty_entries_are_cleaned() {
        assert_eq!(
            servers_from_sources(Some(" http://a:1/ , ,b:2,".into()), None),
            list(&["a:1", "b:2"])
        );
    }

    #[test]
    fn an_empty_source_falls_through() {
        assert_eq!(
            servers_from_sources(Some(" , ".into()), Some("b:2".into())),
            list(&["b:2"])
        );
        assert_eq!(
            servers_from_sources(Some(String::new()), Some(String::new())),
            list(&[DEFAULT_SERVER])
        );
    }
}
