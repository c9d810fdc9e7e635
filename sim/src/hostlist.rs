//! Slurm hostlist expressions: `n[1-4]`, `node[01-16]`, `gpu1`,
//! `a[1-2,5],b3`. Zero padding of the first bound is kept (`[01-16]` gives
//! `01` … `16`).

/// Most hosts one expression may name: a typo such as `n[1-100000000]`
/// gets an error, not an out-of-memory.
pub const HOSTLIST_HOSTS_MAX: usize = 1_000_000;

/// Expands `expr` into host names, in the order written.
pub fn expand(expr: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for item in split_top_level(expr)? {
        expand_one(item, &mut names)?;
    }
    if names.is_empty() {
        return Err("a hostlist naming at least one host".into());
    }
    Ok(names)
}

/// Splits on commas that are not inside brackets.
fn split_top_level(expr: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut depth = 0u32;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(format!("no nested brackets in hostlist {expr:?}")),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(format!("a ']' after a '[' in hostlist {expr:?}")),
            ',' if depth == 0 => {
                items.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("a closing ']' in hostlist {expr:?}"));
    }
    items.push(&expr[start..]);
    Ok(items)
}

fn expand_one(item: &str, names: &mut Vec<String>) -> Result<(), String> {
    let valid_name = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    let Some(open) = item.find('[') else {
        if item.is_empty() || !valid_name(item) {
            return Err(format!(
                "a host name of letters, digits, '-', '_' or '.', not {item:?}"
            ));
        }
        names.push(item.to_string());
        return Ok(());
    };
    let close = item
        .find(']')
        .ok_or_else(|| format!("a closing ']' in {item:?}"))?;
    let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    if !valid_name(prefix) || !valid_name(suffix) || suffix.contains('[') {
        return Err(format!(
            "one bracketed range per host name, as in n[1-4], not {item:?}"
        ));
    }
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let bad = || format!("a range of numbers such as 1-4 or 01-16 in {item:?}, not {range:?}");
        if lo.is_empty()
            || !lo.bytes().all(|b| b.is_ascii_digit())
            || !hi.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let first: u64 = lo.parse().map_err(|_| bad())?;
        let last: u64 = hi.parse().map_err(|_| bad())?;
        if last < first {
            return Err(bad());
        }
        let width = lo.len();
        for n in first..=last {
            if names.len() >= HOSTLIST_HOSTS_MAX {
                return Err(format!("at most {HOSTLIST_HOSTS_MAX} hosts in {item:?}"));
            }
            names.push(format!("{prefix}{n:0width$}{suffix}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_padding_and_lists() {
        assert_eq!(expand("n[1-3]").unwrap(), vec!["n1", "n2", "n3"]);
        assert_eq!(
            expand("node[09-11]").unwrap(),
            vec!["node09", "node10", "node11"]
        );
        assert_eq!(expand("gpu1").unwrap(), vec!["gpu1"]);
        assert_eq!(expand("a[1-2,5],b3").unwrap(), vec!["a1", "a2", "a5", "b3"]);
    }

    #[test]
    fn refuses_malformed_lists() {
        for bad in ["", "n[1-", "n[4-1]", "n[a-b]", "n[1]x[2]", "n[[1]]", "n 1"] {
            assert!(expand(bad).is_err(), "{bad:?}");
        }
    }
}
