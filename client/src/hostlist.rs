//! Slurm's compressed host lists: `node[01-03,07],gpu1` for the hosts
//! `node01 node02 node03 node07 gpu1`, as sinfo and squeue print them.

use std::collections::BTreeMap;

/// Hosts compressed into one list. Names sharing a prefix and a numeric
/// suffix of the same zero-padded width become one bracket of ranges;
/// groups come out sorted by prefix, numbers ascending, duplicates dropped.
pub fn compress(hosts: &[String]) -> String {
    // (prefix, padded width or 0) -> numbers; names without a numeric
    // suffix stand alone.
    let mut groups: BTreeMap<(String, usize), Vec<u64>> = BTreeMap::new();
    let mut plain: Vec<String> = Vec::new();
    for host in hosts {
        match split(host) {
            Some((prefix, digits)) => {
                let width = if digits.len() > 1 && digits.starts_with('0') {
                    digits.len()
                } else {
                    0
                };
                match digits.parse::<u64>() {
                    Ok(n) => groups
                        .entry((prefix.to_string(), width))
                        .or_default()
                        .push(n),
                    Err(_) => plain.push(host.clone()),
                }
            }
            None => plain.push(host.clone()),
        }
    }
    let mut parts: Vec<(String, String)> = plain.into_iter().map(|h| (h.clone(), h)).collect();
    for ((prefix, width), mut numbers) in groups {
        numbers.sort_unstable();
        numbers.dedup();
        let number = |n: u64| format!("{n:0width$}");
        let text = if numbers.len() == 1 {
            format!("{prefix}{}", number(numbers[0]))
        } else {
            let ranges: Vec<String> = ranges(&numbers)
                .into_iter()
                .map(|(lo, hi)| {
                    if lo == hi {
                        number(lo)
                    } else {
                        format!("{}-{}", number(lo), number(hi))
                    }
                })
                .collect();
            format!("{prefix}[{}]", ranges.join(","))
        };
        parts.push((prefix, text));
    }
    parts.sort();
    parts.dedup();
    let texts: Vec<String> = parts.into_iter().map(|(_, text)| text).collect();
    texts.join(",")
}

/// `node017` -> ("node", "017"); None without a numeric suffix.
fn split(host: &str) -> Option<(&str, &str)> {
    let digits = host.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    Some(host.split_at(host.len() - digits))
}

/// Sorted, distinct numbers as inclusive runs.
fn ranges(numbers: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match out.last_mut() {
            Some((_, hi)) if hi.checked_add(1) == Some(n) => *hi = n,
            _ => out.push((n, n)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(hosts: &[&str]) -> String {
        compress(&hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn runs_and_singles() {
        assert_eq!(c(&["h1", "h2", "h3", "h5"]), "h[1-3,5]");
        assert_eq!(c(&["h3"]), "h3");
        assert_eq!(c(&["h2", "h1"]), "h[1-2]");
        assert_eq!(c(&[]), "");
    }

    #[test]
    fn padding_is_kept() {
        assert_eq!(
            c(&["node01", "node02", "node03", "node07"]),
            "node[01-03,07]"
        );
        assert_eq!(c(&["node09", "node10"]), "node09,node10");
    }

    #[test]
    fn prefixes_and_plain_names() {
        assert_eq!(c(&["gpu1", "cpu2", "cpu1", "login"]), "cpu[1-2],gpu1,login");
        assert_eq!(c(&["a1", "a1"]), "a1");
        assert_eq!(c(&["rack1-n1", "rack1-n2"]), "rack1-n[1-2]");
    }
}
