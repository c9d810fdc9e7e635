//! Serde's errors on a scenario file, in the simulator's words: the file,
//! the line (1-based, from the error's byte span), the key's path as the
//! other errors write it (`jobs[2] (id "a").emulators.units`) and what
//! was expected.
//!
//! `toml` tells where an error is but not under which key, so the path is
//! found in a second reading of the file, as bare values with their spans
//! ([`Node`]), done only when the first reading failed.

use std::cmp::Reverse;
use std::fmt::{self, Write};
use std::ops::Range;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::SimError;

/// What a `u32` key holds, in the words of the other errors.
pub const U32_EXPECTED: &str = "a whole number >= 0 and below 2^32";

/// The keys whose values are TRES tables: an unknown key in one is a
/// TRES that does not exist.
const TRES_TABLES: &[&str] = &[
    "grp_tres",
    "grp_tres_mins",
    "max_tres_per_job",
    "max_tres_per_node",
    "max_tres_per_user",
    "min_tres_per_job",
];

/// The error `toml::from_str` gave on `text` (named `file`), as a
/// [`SimError`] that names the line and the key.
pub fn file_error(text: &str, file: &str, err: &toml::de::Error) -> SimError {
    let Ok(root) = toml::from_str::<Node>(text) else {
        // Not TOML at all: the parser's own words (they give the line).
        return SimError::Toml {
            file: file.to_string(),
            message: err.to_string().lines().collect::<Vec<_>>().join(" "),
        };
    };
    let span = err.span().unwrap_or(0..0);
    let line = text
        .get(..span.start)
        .map_or(1, |t| t.matches('\n').count() + 1);
    let file = file.to_string();
    let message = err.message();
    if let Some(key) = quoted(message, "unknown field `") {
        let table = root.path_at(&span, false);
        let key = join(&table, key);
        if TRES_TABLES.contains(&table.rsplit('.').next().unwrap_or_default()) {
            let expected = "a TRES key: node, cpu, mem_mb, gpu or emu".to_string();
            return SimError::InvalidAt {
                file,
                line,
                key,
                expected,
            };
        }
        return SimError::UnknownKeyAt { file, line, key };
    }
    if let Some(key) = quoted(message, "missing field `") {
        let key = join(&root.path_at(&span, false), key);
        return SimError::MissingKeyAt { file, line, key };
    }
    let expected = match message.rsplit_once(", expected ") {
        Some((_, serde_words)) => our_words(serde_words).to_string(),
        None => message.to_string(),
    };
    SimError::InvalidAt {
        file,
        line,
        key: root.path_at(&span, true),
        expected,
    }
}

/// The name in serde's "unknown field `x`, expected ..." and "missing
/// field `x`".
fn quoted<'m>(message: &'m str, prefix: &str) -> Option<&'m str> {
    let rest = message.strip_prefix(prefix)?;
    Some(
        rest.split_once("`, ")
            .map_or(rest.trim_end_matches('`'), |(k, _)| k),
    )
}

/// What serde says was expected, as the simulator's other errors say it.
fn our_words(serde_words: &str) -> &str {
    match serde_words {
        "a boolean" => "true or false",
        "u64" | "usize" => "a whole number >= 0",
        "u32" => U32_EXPECTED,
        "i64" => "a whole number",
        "f64" => "a number >= 0",
        "a sequence" => "an array",
        "struct TresLimits" => "a TRES table such as { node = 4, gpu = 16 }",
        other => other,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A value of the file, with the spans of what it holds.
enum Node {
    Table(Vec<(String, Spanned<Node>)>),
    Array(Vec<Spanned<Node>>),
    Str(String),
    Other,
}

/// A value found at a byte of the file: its span, how deep it is and its
/// path.
struct Found {
    span: Range<usize>,
    depth: usize,
    path: String,
}

impl Node {
    /// The path of the value at `span`: with `outermost_exact`, the
    /// outermost value whose span is exactly `span` if any (a value of
    /// the wrong kind, not the first table of an array of tables that
    /// spans the same bytes); else the innermost value holding its first
    /// byte (the table where a key is unknown or missing).
    fn path_at(&self, span: &Range<usize>, outermost_exact: bool) -> String {
        let mut found = Vec::new();
        self.collect_at(span.start, "", 0, &mut found);
        let exact = found
            .iter()
            .filter(|f| outermost_exact && f.span == *span)
            .min_by_key(|f| f.depth);
        let innermost = || {
            found
                .iter()
                .min_by_key(|f| (f.span.len(), Reverse(f.depth)))
        };
        exact
            .or_else(innermost)
            .map(|f| f.path.clone())
            .unwrap_or_default()
    }

    /// Every value under this one (at `path`, `depth` deep) whose span
    /// holds byte `at`. All of them are looked at: a table's span does not
    /// cover its sub-tables written under headers of their own, and an
    /// array of tables spans what is written between its tables.
    fn collect_at(&self, at: usize, path: &str, depth: usize, found: &mut Vec<Found>) {
        let mut visit = |child: &Spanned<Node>, path: String| {
            let span = child.span();
            child.get_ref().collect_at(at, &path, depth + 1, found);
            if span.start <= at && at < span.end.max(span.start + 1) {
                let depth = depth + 1;
                found.push(Found { span, depth, path });
            }
        };
        match self {
            Node::Table(entries) => {
                for (key, value) in entries {
                    visit(value, join(path, key));
                }
            }
            Node::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let mut item_path = format!("{path}[{i}]");
                    if let (true, Some(id)) = (path == "jobs", item.get_ref().string("id")) {
                        let _ = write!(item_path, " (id {id:?})");
                    }
                    visit(item, item_path);
                }
            }
            Node::Str(_) | Node::Other => {}
        }
    }

    /// The string at `key` of this table.
    fn string(&self, key: &str) -> Option<&str> {
        let Node::Table(entries) = self else {
            return None;
        };
        match entries.iter().find(|(k, _)| k == key)?.1.get_ref() {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_str<E>(self, s: &str) -> Result<Node, E> {
        Ok(Node::Str(s.to_string()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key.starts_with("$__toml_private") {
                // A date-time, which `toml` hands over as a map.
                map.next_value::<IgnoredAny>()?;
                return Ok(Node::Other);
            }
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Table(entries))
    }
}
