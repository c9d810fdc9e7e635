//! Who is submitting. The API trusts the client's word for now (api.proto:
//! "Filled from the caller's identity"), so this reads the login
//! environment rather than pulling in libc for getpwuid.

/// Shown when neither USER nor LOGNAME is set (e.g. a bare container).
pub const UNKNOWN_USER: &str = "nobody";

/// The current user's name: $USER, else $LOGNAME, else "nobody".
pub fn current_user() -> String {
    user_from(std::env::var("USER").ok(), std::env::var("LOGNAME").ok())
}

fn user_from(user: Option<String>, logname: Option<String>) -> String {
    [user, logname]
        .into_iter()
        .flatten()
        .map(|name| name.trim().to_string())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| UNKNOWN_USER.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_then_logname_then_nobody() {
        assert_eq!(user_from(Some("alice".into()), Some("bob".into())), "alice");
        assert_eq!(user_from(None, Some("bob".into())), "bob");
        assert_eq!(user_from(Some(" ".into()), Some("bob".into())), "bob");
        assert_eq!(user_from(None, None), "nobody");
    }
}
