//! Output for the `berth` commands: the library's pipe-tolerant writer
//! and one-line messages (`berth_client::output`), with anyhow errors.

pub use berth_client::output::one_line;

/// Writes `text` to stdout. A closed pipe is not an error: the reader has
/// seen all it wanted.
pub fn emit(text: &str) -> anyhow::Result<()> {
    Ok(berth_client::output::emit(text)?)
}

/// Writes `value` as pretty JSON and a newline.
pub fn emit_json(value: &serde_json::Value) -> anyhow::Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}
