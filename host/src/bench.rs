//! `opu bench`'s measurements that are not the sessions' own: the process's peak resident memory per
//! backend, and each backend's speed as a ratio to the first one of the run.

/// Resets the process's peak resident set size to its current one (Linux: `5` into
/// `/proc/self/clear_refs`), so that the next [`peak_rss_bytes`] is the peak of what ran in between.
/// Returns whether the kernel took it (elsewhere the peak is the process's since it started).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident set size (`VmHWM` of `/proc/self/status`), bytes; `None` where there is no such file.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_hwm(&status)
}

/// `VmHWM:   1234 kB` in a `/proc/<pid>/status` text, in bytes.
fn vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut f = line["VmHWM:".len()..].split_whitespace();
    let n: u64 = f.next()?.parse().ok()?;
    match f.next() {
        Some("kB") => Some(n * 1024),
        _ => None,
    }
}

/// Adds to every row (a JSON object with `prefill_tokens_per_second` and `decode_tokens_per_second`, and
/// `context_decode_tokens_per_second` where measured) the ratio of each figure to the first row's:
/// `prefill_ratio`, `decode_ratio`, `context_decode_ratio` (1 for the first row; null where either is missing).
pub fn add_ratios(rows: &mut [serde_json::Value]) {
    let Some(first) = rows.first().cloned() else { return };
    for r in rows.iter_mut() {
        for (key, ratio) in [
            ("prefill_tokens_per_second", "prefill_ratio"),
            ("decode_tokens_per_second", "decode_ratio"),
            ("context_decode_tokens_per_second", "context_decode_ratio"),
        ] {
            let q = match (r[key].as_f64(), first[key].as_f64()) {
                (Some(a), Some(b)) if b > 0.0 => serde_json::json!(a / b),
                _ => serde_json::Value::Null,
            };
            r[ratio] = q;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_read_and_grows_with_a_touched_allocation() {
        assert_eq!(vm_hwm("Name:\topu\nVmPeak:\t  9 kB\nVmHWM:\t   12345 kB\nVmRSS: 1 kB\n"), Some(12345 * 1024));
        assert_eq!(vm_hwm("VmRSS: 1 kB\n"), None);
        if !std::path::Path::new("/proc/self/status").exists() {
            eprintln!("skipped: no /proc/self/status");
            return;
        }
        reset_peak_rss();
        let before = peak_rss_bytes().expect("VmHWM");
        // 64 MiB, every page touched
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = peak_rss_bytes().expect("VmHWM");
        assert_eq!(std::hint::black_box(&v)[12345], 1);
        assert!(after >= before + (60 << 20), "{before} -> {after}");
        drop(v);
        if reset_peak_rss() {
            assert!(peak_rss_bytes().unwrap() < after, "the reset peak is the current resident size");
        }
    }

    #[test]
    fn ratios_to_the_first_row() {
        let mut rows = vec![
            serde_json::json!({"prefill_tokens_per_second": 100.0, "decode_tokens_per_second": 20.0}),
            serde_json::json!({"prefill_tokens_per_second": 50.0, "decode_tokens_per_second": 30.0, "context_decode_tokens_per_second": 10.0}),
        ];
        add_ratios(&mut rows);
        assert_eq!(rows[0]["prefill_ratio"], 1.0);
        assert_eq!(rows[1]["prefill_ratio"], 0.5);
        assert_eq!(rows[1]["decode_ratio"], 1.5);
        assert!(rows[1]["context_decode_ratio"].is_null());
    }
}
