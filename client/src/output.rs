//! Writing results without failing when the reader goes away
//! (`squeue | head`), and keeping error messages on one line.

use std::io::{ErrorKind, Write};

/// Writes `text` to stdout. A closed pipe is not an error: the reader has
/// seen all it wanted.
pub fn emit(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() != ErrorKind::BrokenPipe => Err(err),
        _ => Ok(()),
    }
}

/// Folds a message onto one line, so every error is exactly one line that
/// scripts can grep and log collectors keep whole.
pub fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_fold_onto_one_line() {
        assert_eq!(one_line("a\n\n  b\n"), "a; b");
        assert_eq!(one_line("plain"), "plain");
    }
}
